#!/usr/bin/env bash
# t_inits.sh - the initialisers against torch.nn.init: tests/models/inits.mp
# (he_normal / he_uniform with mode = "fan_in" and "fan_out",
# glorot_normal, trunc_normal with its default and an asymmetric cut,
# torch_default of Linear, Embedding and LayerNorm, a plain param) is
# built, saved before any step, and tests/py/init_check.py draws torch's
# for the same shapes: the same law (mean, spread, bounds). Bad arguments
# are errors at the initialiser.
# run_all: fusion-independent (initial weights are drawn before any op runs: make test-nofuse skips it)
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
$PY -c "
import numpy as np
np.save('$tmp/x.npy', np.zeros((2, 200), np.float32))
np.save('$tmp/ids.npy', np.zeros(2, np.int32))" &&
    build_trainer tests/models/inits.mp "$tmp/i" &&
    "$tmp/i" --data x="$tmp/x.npy" --data ids="$tmp/ids.npy" --steps 0 --save "$tmp/i.safetensors" \
        >"$tmp/out" 2>&1 && $PY tests/py/init_check.py "$tmp/i.safetensors" ||
    bad "the initialisers differ from torch.nn.init's"
for case in 'he_normal(mode = "fan_mid")|he_normal'"'"'s mode must be "fan_in" or "fan_out", got "fan_mid"' \
    'trunc_normal(0.1, a = 1, b = 0.5)|trunc_normal(std, a, b) needs std > 0 and a < b' \
    'trunc_normal(0.1, a = 5, b = 6)|within 8 std of 0'; do
    printf 'model m\ninput x: f32[2, 4]\nparam w: [4] = %s\nloss = sum(x * w)\ntrain {\n  optimizer = sgd(lr = 0.1)\n  minimize loss\n}\n' \
        "${case%%|*}" >"$tmp/m.mp"
    "$MPCC" "$tmp/m.mp" 2>"$tmp/m.err" && bad "${case%%|*} compiles"
    grep -qF "${case#*|}" "$tmp/m.err" || { bad "${case%%|*}: no message '${case#*|}'"; cat "$tmp/m.err"; }
done
[ $fail = 0 ] && echo PASS || exit 1
