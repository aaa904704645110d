#!/usr/bin/env bash
# cpu_mlp.sh - the generated C trainer against PyTorch on the CPU, for the
# MNIST MLP of LANGUAGE.md (examples/mnist_mlp.mp), batch 128, Adam, the
# same thread count for both. Not part of `make test`.
#
#   bench/cpu_mlp.sh            THREADS=2 STEPS=600 REPEAT=3 by default
#
# Builds the trainer four ways: {float32, mixed_float16} x {plain kernels:
# cc -O3 -march=native -fopenmp; OpenBLAS: the same + -DMP_USE_CBLAS
# -lopenblas}. Throughput is steady-state: the samples of (STEPS - 100)
# steps over the wall time of a STEPS-step run minus that of a 100-step run,
# so loading MNIST and start-up cancel out. PyTorch (torch.set_num_threads
# = THREADS, float32; autocast bf16 as a second column) times STEPS steps
# after a warm-up. Prints a Markdown table: samples/s and the ratio C /
# PyTorch float32. Every figure is the best of REPEAT measurements (the
# machine may be shared: the best is the least disturbed).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
THREADS=${THREADS:-2}
STEPS=${STEPS:-600}
REPEAT=${REPEAT:-3}
W=build/bench
mkdir -p "$W"
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
model=examples/mnist_mlp.mp
[ -e $model ] || model=tests/models/spec_mnist_mlp.mp
mnist_npy "$W/data"
DATA=(--data image="$W/data/train_x.npy" --data label="$W/data/train_y.npy")

# wall seconds of one run of N steps
wall() {
    local bin=$1 n=$2 t0 t1
    t0=$(date +%s.%N)
    "$bin" "${DATA[@]}" --steps "$n" --log-every 100000 >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

declare -A sps
for prec in float32 mixed_float16; do
    for blas in plain openblas; do
        flags=(-O3 -march=native -fopenmp)
        libs=()
        [ $blas = openblas ] && flags+=(-DMP_USE_CBLAS) && libs=(-lopenblas)
        bin=$W/mlp_${prec}_$blas
        build_trainer $model "$bin" --precision $prec -- "${flags[@]}" "${libs[@]}"
        best=0
        for _ in $(seq "$REPEAT"); do
            short=$(wall "$bin" 100)
            long=$(wall "$bin" "$STEPS")
            best=$(echo "r = ($STEPS - 100) * 128 / ($long - $short); if (r > $best) r else $best" | bc -l)
        done
        sps[$prec,$blas]=$best
        printf '  C %-14s %-8s %8.0f samples/s\n' $prec $blas "${sps[$prec,$blas]}" >&2
    done
done
t32=0 tbf=0
for _ in $(seq "$REPEAT"); do
    read -r _ t _ < <($PY bench/cpu_mlp.py "$W/data/train_x.npy" "$W/data/train_y.npy" "$THREADS" "$STEPS" | grep '^float32')
    t32=$(echo "if ($t > $t32) $t else $t32" | bc)
done
tbf=$($PY bench/cpu_mlp.py "$W/data/train_x.npy" "$W/data/train_y.npy" "$THREADS" 200 bf16 | awk '/^autocast_bf16/ { print $2 }')

echo
echo "MNIST MLP 784-512-10, batch 128, Adam, $THREADS threads, $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "PyTorch $($PY -c 'import torch; print(torch.__version__)'): float32 $t32 samples/s; autocast(cpu, bfloat16) $tbf samples/s"
echo
echo "| C trainer | kernels | samples/s | C / PyTorch float32 | C / PyTorch autocast bf16 |"
echo "| --- | --- | ---: | ---: | ---: |"
for prec in float32 mixed_float16; do
    for blas in plain openblas; do
        s=${sps[$prec,$blas]}
        printf '| %s | %s | %.0f | %.2f | %.2f |\n' $prec $blas "$s" "$(echo "$s / $t32" | bc -l)" "$(echo "$s / $tbf" | bc -l)"
    done
done
