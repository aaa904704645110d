#!/usr/bin/env bash
# fp8.sh - what mixed_float8 costs in accuracy (PRECISION.md "Additions:
# TF32 and FP8"), on the C program: the same model, data, initial weights
# and batches under float32, float32 with float32_matmul = "tf32",
# mixed_bfloat16 and mixed_float8 (delayed scaling, the defaults):
#   - examples/mnist_mlp.mp (its loss_scale line dropped: no policy here
#     needs one), MNIST_STEPS (2000) steps of Adam on the MNIST training
#     set, then the test set's loss and accuracy;
#   - examples/gpt2.mp at its CPU size (4 layers, width 128, characters of
#     tiny shakespeare), GPT_STEPS (2000) steps, then the validation loss
#     (the last 10% of the text).
# Prints a Markdown table; bench/RESULTS.md keeps it. Accuracy, not speed:
# the machine may be busy. Not part of `make test`.
#
#   bench/fp8.sh                 MNIST_STEPS=2000 GPT_STEPS=2000 THREADS=2
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
MNIST_STEPS=${MNIST_STEPS:-2000}
GPT_STEPS=${GPT_STEPS:-2000}
export OMP_NUM_THREADS=${THREADS:-2}
W=build/bench/fp8
mkdir -p "$W"
make -s mpcc build/text2bin build/idx2npy
mnist_npy "$W/mnist"
[ -e "$W/val.bin" ] ||
    build/text2bin ../shared/data/tinyshakespeare/input.txt "$W/train.bin" "$W/val.bin" "$W/vocab.txt" >/dev/null

POLICIES="float32 tf32 mixed_bfloat16 mixed_float8"
build() {   # build MODEL.mp NAME POLICY
    local opt=(--precision "$3")
    [ "$3" = tf32 ] && opt=(--precision float32 --float32-matmul tf32)
    ./mpcc "$1" "${opt[@]}" --target c -o "$W/$2.c"
    cc -O3 -march=native -fopenmp -o "$W/$2" "$W/$2.c" -lm
}
eval_of() { grep -o '"eval":{[^}]*}' "$1" | tail -n 1; }   # the last eval line of a log

grep -v '^ *loss_scale' examples/mnist_mlp.mp >"$W/mnist_mlp.mp"
declare -A res
for p in $POLICIES; do
    build "$W/mnist_mlp.mp" "mnist_$p" "$p"
    "$W/mnist_$p" --data "image=$W/mnist/train_x.npy" --data "label=$W/mnist/train_y.npy" \
        --eval "image=$W/mnist/test_x.npy" --eval "label=$W/mnist/test_y.npy" --steps "$MNIST_STEPS" \
        --eval-every "$MNIST_STEPS" --log "$W/mnist_$p.jsonl" --log-every 100 >"$W/mnist_$p.out" 2>&1
    res[mnist_$p]=$(eval_of "$W/mnist_$p.jsonl")
    build examples/gpt2.mp "gpt2_$p" "$p"
    "$W/gpt2_$p" --data "seq=$W/train.bin" --eval "seq=$W/val.bin" --steps "$GPT_STEPS" \
        --eval-every "$GPT_STEPS" --log "$W/gpt2_$p.jsonl" --log-every 100 >"$W/gpt2_$p.out" 2>&1
    res[gpt2_$p]=$(eval_of "$W/gpt2_$p.jsonl")
    echo "$p: mnist ${res[mnist_$p]}  gpt2 ${res[gpt2_$p]}" >&2
done

"$PY" - "$W" "$MNIST_STEPS" "$GPT_STEPS" $POLICIES <<'EOF'
import json, sys
w, ms, gs, pols = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def ev(path):
    last = [json.loads(l) for l in open(path) if '"eval"' in l][-1]["eval"]
    return last
name = {"tf32": "float32, float32_matmul tf32"}
print(f"| policy | MNIST MLP, {ms} steps: test loss | test accuracy | vs float32 (points) "
      f"| GPT-2 char, {gs} steps: val loss | vs mixed_bfloat16 |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
m32 = ev(f"{w}/mnist_float32.jsonl")["accuracy"]
gbf = ev(f"{w}/gpt2_mixed_bfloat16.jsonl")["loss"]
for p in pols:
    m, g = ev(f"{w}/mnist_{p}.jsonl"), ev(f"{w}/gpt2_{p}.jsonl")
    print(f"| {name.get(p, p)} | {m['loss']:.4f} | {100 * m['accuracy']:.2f}% | "
          f"{100 * (m['accuracy'] - m32):+.2f} | {g['loss']:.4f} | {100 * (g['loss'] / gbf - 1):+.2f}% |")
EOF
