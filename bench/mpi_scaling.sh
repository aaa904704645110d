#!/usr/bin/env bash
# mpi_scaling.sh - data parallel scaling of the C program on this machine
# (README "Training on several processes"): the MNIST MLP of LANGUAGE.md
# (examples/mnist_mlp.mp, batch 128 per rank) built with
# mpicc -O3 -march=native -DMP_USE_MPI, one thread per rank, run by
# mpirun -np N for each N in RANKS. Not part of `make test`.
#
#   bench/mpi_scaling.sh           RANKS="1 2" STEPS=400 REPEAT=3 by default
#
# Throughput is steady-state: the samples of (STEPS - 50) steps (N x 128 a
# step) over the wall time of a STEPS-step run minus that of a 50-step run,
# so start-up and loading MNIST cancel out; the best of REPEAT. Prints a
# Markdown table: ranks, samples/s, speed-up over one rank, and the load
# average at the start (a shared machine skews every figure).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
RANKS=${RANKS:-"1 2"}
STEPS=${STEPS:-400}
REPEAT=${REPEAT:-3}
W=build/bench
mkdir -p "$W"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mnist_npy "$W/data"
DATA=(--data image="$W/data/train_x.npy" --data label="$W/data/train_y.npy")
./mpcc examples/mnist_mlp.mp --target c -o "$W/mpi_mlp.c"
mpicc -O3 -march=native -DMP_USE_MPI -o "$W/mpi_mlp" "$W/mpi_mlp.c" -lm

wall() {   # wall N STEPS: seconds of one run
    local t0 t1
    t0=$(date +%s.%N)
    mpirun --oversubscribe -np "$1" "$W/mpi_mlp" "${DATA[@]}" --steps "$2" --log-every 100000 >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(getconf _NPROCESSORS_ONLN) cores"
echo
echo "| ranks | samples/s | speed-up |"
echo "| --- | --- | --- |"
base=
for n in $RANKS; do
    best=0
    for _ in $(seq "$REPEAT"); do
        long=$(wall "$n" "$STEPS")
        short=$(wall "$n" 50)
        sps=$(echo "($STEPS - 50) * 128 * $n / ($long - $short)" | bc -l)
        best=$(echo "if ($sps > $best) $sps else $best" | bc -l)
    done
    [ -n "$base" ] || base=$best
    printf '| %d | %.0f | %.2f |\n' "$n" "$best" "$(echo "$best / $base" | bc -l)"
done
