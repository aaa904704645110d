#!/usr/bin/env bash
# t_predict_output.sh - the value --predict writes (TRAINER.md "Additions for
# the architectures users bring"):
#   - a loss that is one loss operation (tests/models/gate.mp: mse(y, ...)):
#     --output defaults to the value the loss is computed from (y), --help
#     says so, and --predict without --output writes it ([N, 16]);
#   - a loss made of several operations (tests/models/two_losses.mp:
#     cross_entropy + 0.1 * mse): no default; --predict without --output is
#     a usage error (exit 2) listing the names --output can take (the values
#     with one row per sample: h, logits, reg), before any file is written;
#     --help lists them and says there is no default; --output reg works.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

expect() {    # expect RC WHAT CMD...: exit status RC and WHAT on stderr
    local rc=$1 what=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    [ "$got" = "$rc" ] && grep -qF -- "$what" "$tmp/err" ||
        bad "$* -> exit $got (expected $rc), stderr: $(head -c 300 "$tmp/err") (expected '$what')"
}
rows() {      # rows FILE.npy: its shape, as "N,D"
    $PY -c 'import numpy as np, sys; print(",".join(map(str, np.load(sys.argv[1]).shape)))' "$1"
}

for n in gate two_losses; do
    build_trainer "tests/models/$n.mp" "$tmp/$n" -- -O1 || { bad "$n does not build"; continue; }
    read -r -a pairs <<<"$($PY tests/py/data.py --random "tests/models/$n.mp" "$tmp/$n.data" 40)"
    data=() pred=()
    for p in "${pairs[@]}"; do data+=(--data "$p"); pred+=(--predict "$p"); done
    "$tmp/$n" "${data[@]}" --steps 2 --save "$tmp/$n.st" >"$tmp/$n.train" 2>&1 ||
        bad "$n: training failed: $(tail -n 2 "$tmp/$n.train")"
    "$tmp/$n" --help >"$tmp/$n.help" 2>&1 || bad "$n: --help failed"
done

# one loss operation: the default is the loss's input
grep -qF -- "the value --predict writes (default: y)" "$tmp/gate.help" || bad "gate: --help does not name the default y"
grep -qF -- "--output can take (the values with one row per sample): a, b, h, y" "$tmp/gate.help" ||
    bad "gate: --help does not list the values: $(grep -F -- '--output' "$tmp/gate.help")"
expect 0 "wrote $tmp/g.npy: 'y' of 40 samples" "$tmp/gate" --init "$tmp/gate.st" \
    --predict x="$tmp/gate.data/x.npy" --out "$tmp/g.npy"
[ "$(rows "$tmp/g.npy")" = "40,16" ] || bad "gate: --predict wrote shape $(rows "$tmp/g.npy"), not 40,16"

# several operations: no default
grep -qF -- "the value --predict writes (default: none: the loss is not one loss operation)" \
    "$tmp/two_losses.help" || bad "two_losses: --help does not say there is no default"
grep -qF -- "--output can take (the values with one row per sample): h, logits, reg" "$tmp/two_losses.help" ||
    bad "two_losses: --help does not list the values: $(grep -F -- '--output' "$tmp/two_losses.help")"
expect 2 "--predict needs --output VALUE: the loss is not one loss operation, so there is no default (--output can take: h, logits, reg)" \
    "$tmp/two_losses" --init "$tmp/two_losses.st" --predict x="$tmp/two_losses.data/x.npy" --out "$tmp/t.npy"
[ -e "$tmp/t.npy" ] && bad "two_losses: the refused --predict wrote its --out file"
expect 0 "wrote $tmp/t.npy: 'reg' of 40 samples" "$tmp/two_losses" --init "$tmp/two_losses.st" \
    --predict x="$tmp/two_losses.data/x.npy" --out "$tmp/t.npy" --output reg
[ "$(rows "$tmp/t.npy")" = "40,2" ] || bad "two_losses: --output reg wrote shape $(rows "$tmp/t.npy"), not 40,2"

[ $fail = 0 ] && echo "PASS: t_predict_output" || echo "FAIL: t_predict_output"
exit $fail
