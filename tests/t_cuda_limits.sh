#!/usr/bin/env bash
# run_all: once (CI's time allows the CUDA builds and the stand-in for the default, fused program only: make test-nofuse skips it; MPCC_NO_FUSE=1 ONLY=t_cuda make test runs them unfused)
# t_cuda_limits.sh - a model the CUDA program cannot run says so in one
# line and exits 1, through the CPU stand-in (tests/cuda/mp_cuda_emu.h):
# attention with a head size past what its tiles in shared memory hold
# (4000, past the forward's 3036; the inputs need no gradient here;
# mp_cuda_ops.h mp_cu_att_tiles) names the op, the axis and the limit,
# instead of launching a kernel with tiles of no rows. A head size within
# the limit trains (the control: the same model at D 64).
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
MPCC=${MPCC:-./mpcc}
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
[ -n "$CXX" ] || { echo "SKIP: no C++ compiler"; exit 0; }

model() {   # model D
    cat <<EOF2
model heads$1
input x: f32[2, 1, 4, $1]
input y: i32[2]
param w: [$1, 4] = normal(0.1)
a = attention(x, x, x)
logits: f32 = reshape(sum(a, axis = 2), [2, $1]) @ w
loss = cross_entropy(logits, y)
train {
  optimizer = sgd(lr = 0.1)
  minimize loss
}
EOF2
}
/usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
r = np.random.default_rng(0)
for d in (64, 4000):
    np.save(f"{sys.argv[1]}/x{d}.npy", r.standard_normal((8, 1, 4, d)).astype(np.float32))
np.save(f"{sys.argv[1]}/y.npy", r.integers(0, 4, 8).astype(np.int32))
PY
for d in 64 4000; do
    model $d >"$tmp/h$d.mp"
    "$MPCC" "$tmp/h$d.mp" --target cuda -o "$tmp/h$d.cu" || { bad "mpcc h$d"; continue; }
    "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$tmp/h$d.cu" \
        -o "$tmp/h$d.emu" -lm 2>"$tmp/h$d.cxx" || { bad "h$d does not build: $(head -c 300 "$tmp/h$d.cxx")"; continue; }
    "$tmp/h$d.emu" --data x="$tmp/x$d.npy" --data y="$tmp/y.npy" --steps 2 --no-shuffle \
        >"$tmp/h$d.out" 2>"$tmp/h$d.err"
    echo $? >"$tmp/h$d.rc"
done
[ "$(cat "$tmp/h64.rc" 2>/dev/null)" = 0 ] && echo "ok   head size 64 trains" \
    || bad "head size 64: exit $(cat "$tmp/h64.rc" 2>/dev/null), $(head -c 300 "$tmp/h64.err" 2>/dev/null)"
rc=$(cat "$tmp/h4000.rc" 2>/dev/null)
if [ "$rc" = 1 ] && [ "$(wc -l <"$tmp/h4000.err")" -eq 1 ] \
    && grep -Eq "attention.*a head size \(the last axis of q, k, v\) of 4000, more than the [0-9]+" "$tmp/h4000.err"; then
    echo "ok   head size 4000: $(cat "$tmp/h4000.err")"
else
    bad "head size 4000: exit $rc, $(head -c 400 "$tmp/h4000.err" 2>/dev/null)"
fi
exit $fail
