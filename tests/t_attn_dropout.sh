#!/usr/bin/env bash
# t_attn_dropout.sh - attention(..., dropout = p) in whole C trainers
# (tests/cuda/emu_mask.mp at float32: dropout 0.2 on a masked attention):
#   1. evaluation and --predict run without dropout: from one checkpoint,
#      the eval loss and the predicted logits equal those of the same model
#      with dropout = 0, bit for bit; training does drop: one step from that
#      checkpoint logs another loss than the model without dropout;
#   2. the masks are a function of (seed, step, micro-batch, node), nothing
#      kept between steps: 2 steps saved and resumed to 4 equal 4 steps in
#      one run, log and checkpoint bit for bit.
# (Gradients: tests/gradcheck/gc_attention_dropout.mp; the kernels against
# PyTorch with the generator's bits: tests/kernels_torch.py; the CUDA
# program: tests/t_cuda_emu.sh.)
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
same() { $PY tests/py/same.py "$@" || fail=1; }

sed 's/dropout = 0\.2, /dropout = 0, /' tests/cuda/emu_mask.mp >"$tmp/nodrop.mp"
cmp -s tests/cuda/emu_mask.mp "$tmp/nodrop.mp" && { echo "FAIL: no dropout = 0.2 in emu_mask.mp"; exit 1; }
build_trainer tests/cuda/emu_mask.mp "$tmp/drop" --precision float32 || exit 1
build_trainer "$tmp/nodrop.mp" "$tmp/nodrop" --precision float32 || exit 1
grep -q "training ? (float)0.2 :" "$tmp/drop.c" || bad "the trainer's attention has no dropout 0.2"
grep -q "training ? (float)" "$tmp/nodrop.c" && bad "dropout = 0 still emits dropout"

$PY - "$tmp" <<'PY'
import numpy as np, sys
d, r = sys.argv[1], np.random.RandomState(3)
np.save(d + "/tok.npy", r.randint(0, 16, (32, 20)).astype(np.int32))
np.save(d + "/tgt.npy", r.randint(0, 16, (32, 20)).astype(np.int32))
pad = (np.arange(20)[None, :] < r.randint(1, 21, (32, 1))).astype(np.uint8)
np.save(d + "/pad.npy", pad.reshape(32, 1, 1, 20))
PY
data="--data tokens=$tmp/tok.npy --data pad=$tmp/pad.npy --data targets=$tmp/tgt.npy --no-shuffle"
ev="--eval tokens=$tmp/tok.npy --eval pad=$tmp/pad.npy --eval targets=$tmp/tgt.npy"
run() {   # run NAME LOG ARGS...: the trainer NAME, its log to LOG
    local n=$1 log=$2
    shift 2
    "$tmp/$n" "$@" --log "$tmp/$log.jsonl" >"$tmp/$log.out" 2>&1 ||
        { bad "$n $*:"; tail -n 5 "$tmp/$log.out"; }
}
evals() { grep -o '"eval":{[^}]*}' "$tmp/$1.jsonl"; }
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/$1.jsonl"; }

# ---- 1. evaluation and --predict: no dropout --------------------------------
# shellcheck disable=SC2086
run drop a4 $data --steps 4 --log-every 1 --save "$tmp/a4.safetensors"
for n in drop nodrop; do
    # shellcheck disable=SC2086
    run "$n" "e_$n" --init "$tmp/a4.safetensors" --steps 0 $ev
    "$tmp/$n" --init "$tmp/a4.safetensors" --predict tokens="$tmp/tok.npy" --predict pad="$tmp/pad.npy" \
        --out "$tmp/p_$n.npy" >"$tmp/p_$n.out" 2>&1 || { bad "$n --predict:"; tail -n 5 "$tmp/p_$n.out"; }
    # shellcheck disable=SC2086
    run "$n" "t_$n" --init "$tmp/a4.safetensors" $data --steps 1 --log-every 1
done
if [ -n "$(evals e_drop)" ] && [ "$(evals e_drop)" = "$(evals e_nodrop)" ]; then
    echo "ok   evaluation without dropout: $(evals e_drop)"
else
    bad "eval with dropout 0.2 '$(evals e_drop)', with 0 '$(evals e_nodrop)': want one value"
fi
if [ -s "$tmp/p_drop.npy" ] && cmp -s "$tmp/p_drop.npy" "$tmp/p_nodrop.npy"; then
    echo "ok   --predict without dropout: the logits of dropout = 0, byte for byte"
else
    bad "--predict's logits differ between dropout 0.2 and 0"
fi
if [ -n "$(losses t_drop)" ] && [ "$(losses t_drop)" != "$(losses t_nodrop)" ]; then
    echo "ok   training drops: $(losses t_drop) against $(losses t_nodrop) without dropout"
else
    bad "a training step with dropout 0.2 logs '$(losses t_drop)', without '$(losses t_nodrop)'"
fi

# ---- 2. resumed = one run ---------------------------------------------------
# shellcheck disable=SC2086
run drop a2 $data --steps 2 --log-every 1 --save "$tmp/a2.safetensors"
# shellcheck disable=SC2086
run drop r4 $data --resume "$tmp/a2.safetensors" --steps 4 --log-every 1 --save "$tmp/r4.safetensors"
same log "$tmp/a4.jsonl" "$tmp/r4.jsonl"
same ckpt "$tmp/a4.safetensors" "$tmp/r4.safetensors"
[ $fail = 0 ] && echo "ok   2 steps resumed to 4 = 4 steps, bit for bit"
exit $fail
