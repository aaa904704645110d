#!/usr/bin/env bash
# demo.sh - the README's main job (`make demo`): compile the MNIST MLP,
# prepare MNIST, train it, print test accuracy.
#
# MNIST comes from $MNIST_DIR, else ../shared/data/mnist next to the
# checkout. Without the four files (gzipped or not) there, it stops at
# once, before building anything, with one line saying which files to get
# and where to put them (exit 1).
#
# On a machine with an NVIDIA GPU (nvidia-smi works) and nvcc, the CUDA
# target is built and run; otherwise the portable C target on the CPU.
# Set DEMO_TARGET=c to force the CPU, DEMO_STEPS to change the length.
set -euo pipefail
cd "$(dirname "$0")/.."
MNIST_DIR=${MNIST_DIR:-../shared/data/mnist}
STEPS=${DEMO_STEPS:-2000}
OUT=build/demo
FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

for f in "${FILES[@]}"; do
    if [ ! -e "$MNIST_DIR/$f.gz" ] && [ ! -e "$MNIST_DIR/$f" ]; then
        echo "demo: no MNIST in $MNIST_DIR ($f.gz is missing): download $(printf '%s.gz, ' "${FILES[@]:0:3}")and" \
             "${FILES[3]}.gz (from a mirror of http://yann.lecun.com/exdb/mnist/) into ../shared/data/mnist/" \
             "beside the checkout, or into any folder and run: MNIST_DIR=that/folder make demo" >&2
        exit 1
    fi
done

"${MAKE:-make}" --no-print-directory mpcc build/idx2npy
mkdir -p "$OUT"
src() { [ -e "$MNIST_DIR/$1.gz" ] && echo "$MNIST_DIR/$1.gz" || echo "$MNIST_DIR/$1"; }

echo "== preparing MNIST as .npy in $OUT"
build/idx2npy "$(src train-images-idx3-ubyte)" "$OUT/train_x.npy"
build/idx2npy "$(src train-labels-idx1-ubyte)" "$OUT/train_y.npy"
build/idx2npy "$(src t10k-images-idx3-ubyte)" "$OUT/test_x.npy"
build/idx2npy "$(src t10k-labels-idx1-ubyte)" "$OUT/test_y.npy"

target=${DEMO_TARGET:-}
if [ -z "$target" ]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
        target=cuda
    else
        target=c
    fi
fi

echo "== compiling examples/mnist_mlp.mp for the $target target"
./mpcc examples/mnist_mlp.mp --dump-plan | tail -n 12
if [ "$target" = cuda ]; then
    ./mpcc examples/mnist_mlp.mp -o "$OUT/train.cu"
    nvcc -O3 -arch=native -o "$OUT/train" "$OUT/train.cu"
else
    ./mpcc examples/mnist_mlp.mp --target c -o "$OUT/train.c"
    omp=-fopenmp; echo 'int main(void){return 0;}' | cc -fopenmp -x c - -o /dev/null 2>/dev/null || omp=
    cc -O3 -march=native $omp -o "$OUT/train" "$OUT/train.c" -lm
fi

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "== training $STEPS steps"
"$OUT/train" --data image="$OUT/train_x.npy" --data label="$OUT/train_y.npy" \
    --eval image="$OUT/test_x.npy" --eval label="$OUT/test_y.npy" \
    --steps "$STEPS" --eval-every "$STEPS" --log-every 200 \
    --log "$OUT/log.jsonl" --save "$OUT/mnist_mlp.safetensors"
acc=$(grep '"eval"' "$OUT/log.jsonl" | tail -n 1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p')
[ -n "$acc" ] || { echo "demo: no evaluation in $OUT/log.jsonl" >&2; exit 1; }
awk -v a="$acc" -v t="$target" 'BEGIN { printf "== MNIST test accuracy after '"$STEPS"' steps (%s target): %.2f%%\n", t, 100 * a }'
echo "== checkpoint: $OUT/mnist_mlp.safetensors, log: $OUT/log.jsonl"
