#!/usr/bin/env bash
# t_nonfinite.sh - TRAINER.md "Non-finite values" (data aside):
#   1. float32 (no loss scaling): a non-finite loss stops the run with exit 1
#      at its step, naming it (with --check-numerics: the operation and its
#      source line); the checkpoints written before stay finite. The same in
#      the CUDA program (CPU stand-in), which names a range of steps when it
#      did not read every step's loss back.
#   2. A checkpoint is never written from non-finite parameters: the save is
#      refused (exit 1) and the file already there is kept as it was.
#   3. NaN / Inf in --init and --resume files: refused, naming the file and
#      the tensor.
#   4. With loss scaling, the skipped steps are reported at the end of the
#      run, with the count the log shows.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

# expect RC FRAGMENT... -- CMD...: exit RC, the last stderr line an error
# holding every FRAGMENT
expect() {
    local want=$1 frags=() rc f; shift
    while [ "$1" != -- ]; do frags+=("$1"); shift; done; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    local last; last=$(tail -n 1 "$tmp/err")
    [ "$rc" = "$want" ] || { bad "exit $rc, want $want: $last"; return; }
    for f in "${frags[@]}"; do
        [[ $last == *"$f"* ]] || { bad "'$f' not in: $last"; return; }
    done
    echo "ok   exit $rc: $last"
}
# all_finite FILE: every tensor of a safetensors file is finite
all_finite() {
    $PY - "$1" <<'EOF'
import sys; sys.path.insert(0, "tests/py"); import st, numpy as np
bad = [k for k, v in st.read(sys.argv[1]).items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
sys.exit(f"  non-finite tensors in {sys.argv[1]}: {bad}" if bad else 0)
EOF
}

mnist_first train 256 "$tmp/x.npy" "$tmp/y.npy" || exit 1
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy")
build_trainer tests/models/mlp_small.mp "$tmp/f32" --precision float32 || exit 1
T=$tmp/f32

echo "== 1. a non-finite loss stops a float32 run"
# lr 1e30: step 1 is finite, its update makes step 2's logits overflow
expect 1 "step 2: the loss is NaN" "without loss scaling" -- \
    "$T" "${D[@]}" --steps 10 --lr 1e30 --save-every 1 --save "$tmp/ck.st"
all_finite "$tmp/ck.st" || bad "the step-1 checkpoint is not finite"
expect 1 "step 2: --check-numerics: operation 'linear' at mlp_small.mp:14 (logits)" -- \
    "$T" "${D[@]}" --steps 10 --lr 1e30 --check-numerics

emu_trainer tests/models/mlp_small.mp "$tmp/cu" --precision float32
case $? in 1) fail=1 ;; 0)
    # the device reads the loss back when a line is logged: exact with
    # --log-every 1, else the range of steps it may have turned at
    expect 1 "step 2: the loss is NaN;" -- "$tmp/cu" "${D[@]}" --steps 10 --lr 1e30 --log-every 1
    expect 1 "step 5: the loss is NaN (first non-finite at a step in 1..5" -- \
        "$tmp/cu" "${D[@]}" --steps 10 --lr 1e30 --log-every 5 --save "$tmp/cu.st"
    [ -e "$tmp/cu.st" ] && bad "the CUDA program wrote a checkpoint after a non-finite loss" ;;
esac

echo "== 2. no checkpoint from non-finite parameters"
cp "$tmp/ck.st" "$tmp/ck.orig"
# lr 1e300 is +inf in f32: the update turns the parameters into NaN
expect 1 "ck.st: not written: parameter 'h.weight' holds NaN" "after step 1" -- \
    "$T" "${D[@]}" --steps 1 --lr 1e300 --save "$tmp/ck.st"
cmp -s "$tmp/ck.st" "$tmp/ck.orig" || bad "the refused save changed the checkpoint"

echo "== 3. NaN / Inf in --init and --resume files"
expect 0 -- "$T" "${D[@]}" --steps 2 --save "$tmp/good.st"
$PY - "$tmp/good.st" "$tmp" <<'EOF' || exit 1
import sys; sys.path.insert(0, "tests/py"); import st, numpy as np
t, meta = st.read(sys.argv[1], with_meta=True)
for name, key, v in (("nan", "h.weight", np.nan), ("inf", "logits.bias", -np.inf)):
    u = {k: a.copy() for k, a in t.items()}
    u[key].flat[5] = v
    st.write(f"{sys.argv[2]}/{name}.st", u, meta)
EOF
for opt in --init --resume; do
    expect 1 "nan.st: tensor 'h.weight' holds NaN at element 5" -- "$T" "${D[@]}" --steps 3 $opt "$tmp/nan.st"
    expect 1 "inf.st: tensor 'logits.bias' holds -inf at element 5" -- "$T" "${D[@]}" --steps 3 $opt "$tmp/inf.st"
done

echo "== 4. skipped steps are reported at the end"
build_trainer tests/models/ls_overflow.mp "$tmp/ovf" || exit 1
"$tmp/ovf" "${D[@]}" --steps 30 --log "$tmp/ovf.jsonl" --log-every 1 2>"$tmp/ovf.err" ||
    bad "the loss-scaling run failed: $(tail -n 1 "$tmp/ovf.err")"
want=$(jsonl_field "$tmp/ovf.jsonl" skipped | tail -n 1)
line=$(grep "steps skipped" "$tmp/ovf.err")
if [ -z "$want" ] || [ "$want" = 0 ] || [ "$line" != "loss scaling: $want of 30 steps skipped (non-finite gradients)" ]; then
    bad "skipped steps: log says '$want', the run said '$line'"
else
    echo "ok   $line"
fi
exit $fail
