#!/usr/bin/env bash
# t_random.sh - randn / rand / randn_like / rand_like (LANGUAGE.md
# "Randomness") in whole trainers:
#   1. tests/models/rng_twin.mp (float32, accumulate 2) against a NumPy
#      twin that draws with tests/py/rng.py, an independent implementation
#      of the generator: every logged loss, the trained weight and the eval
#      loss (each micro-batch its own draw, evaluation batch b micro-batch
#      -1 - b); --predict of its randn and rand values equal rng.py's (rand
#      bit for bit); stopped at step 3 and resumed at 1 and 2 OpenMP threads
#      = one run, bit for bit;
#   2. examples/vae.mp on real MNIST (2048 training images): the eval loss
#      after 150 steps is under 40% of the first step's loss; the same seed
#      gives the same bits (checkpoint, log, eval), another seed from the
#      same weights and data order another checkpoint; 15 steps at 1 thread
#      resumed to 30 at 2 threads = 30 at 1 thread = 30 at 2 threads, bit
#      for bit (evaluations, which draw too, included); --predict z twice
#      gives the same file, and z = mu + exp(logvar / 2) eps with eps
#      rng.py's evaluation draw; and in float32 against PyTorch's VAE
#      (tests/py/vae_twin.py: torch's own binary_cross_entropy_with_logits
#      and KL, fed rng.py's noise) from the same weights: every step's loss
#      to 2e-5, the weights after 6 Adam steps to 2e-4;
#   3. the CUDA program in the CPU stand-in (tests/cuda/mp_cuda_emu.h):
#      rng_twin's run equals the NumPy twin too, and its --predict of e
#      and u from the C program's checkpoint is the C program's, byte for
#      byte; examples/vae.mp's captured steps and evaluations give the C
#      program's losses (2e-3) (skipped without a C++ compiler);
#   4. data parallel (skipped without mpicc / mpirun): 2 ranks x
#      accumulate 2 equal the NumPy twin with 4 micro-batches a step.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=${B:-build}/t_random
rm -rf "$W"
mkdir -p "$W"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
same() { $PY tests/py/same.py "$@" || fail=1; }
check() { $PY tests/py/rng_check.py "$@" || fail=1; }

# ---- 1. rng_twin against the NumPy twin -------------------------------------
echo "== 1. rng_twin (C) against tests/py/rng.py"
T=$W/twin
mkdir -p "$T"
$PY tests/py/rng_check.py init "$T" && "$MPCC" tests/models/rng_twin.mp --dump-plan=json >"$T/plan.json" &&
    build_trainer tests/models/rng_twin.mp "$T/t" -- -O2 -fopenmp || exit 1
# twin BIN DIR STEPS [options]: one run on the twin's data, logged every step
# (BIN split into words: "mpirun -np 2 PROGRAM")
twin() {
    local bin=$1 d=$2 steps=$3
    shift 3
    rm -f "$d/twin.jsonl"
    $bin --data x="$T/x.npy" --eval x="$T/x.npy" --no-shuffle --log-every 1 --eval-every 6 \
        --steps "$steps" --log "$d/twin.jsonl" --save "$d/twin.safetensors" "$@" >"$d/out" 2>&1 ||
        { bad "$bin $*"; tail -n 3 "$d/out"; return 1; }
}
OMP_NUM_THREADS=1 twin "$T/t" "$T" 6 --init "$T/init.safetensors" --seed 5 && check twin "$T" 5
for v in e u; do
    "$T/t" --resume "$T/twin.safetensors" --predict x="$T/x.npy" --output $v --out "$T/$v.npy" >/dev/null &&
        check predict "$T/$v.npy" "$T/plan.json" $v 5 6 || bad "--predict --output $v"
done
mkdir -p "$T/r"
cp "$T/plan.json" "$T/init.safetensors" "$T/r/"
OMP_NUM_THREADS=1 twin "$T/t" "$T/r" 3 --init "$T/init.safetensors" --seed 5 &&
    mv "$T/r/twin.jsonl" "$T/r/a.jsonl" &&
    OMP_NUM_THREADS=2 twin "$T/t" "$T/r" 6 --resume "$T/r/twin.safetensors" &&
    same ckpt "$T/twin.safetensors" "$T/r/twin.safetensors" && same log "$T/twin.jsonl" "$T/r/a.jsonl" &&
    same log "$T/twin.jsonl" "$T/r/twin.jsonl" && echo "  3 steps at 1 thread + 3 resumed at 2 = 6 at 1"

# ---- 2. the VAE on MNIST -------------------------------------------------------
echo "== 2. examples/vae.mp on MNIST"
V=$W/vae
mkdir -p "$V"
mnist_first train 2048 "$V/x.npy" "$V/y.npy" && mnist_first t10k 512 "$V/tx.npy" "$V/ty.npy" &&
    "$MPCC" examples/vae.mp --dump-plan=json >"$V/plan.json" &&
    build_trainer examples/vae.mp "$V/vae" -- -O2 -fopenmp || exit 1
# vae LOG CKPT STEPS [options]
vae() {
    local log=$1 ck=$2 steps=$3
    shift 3
    rm -f "$log"
    "$V/vae" --data image="$V/x.npy" --eval image="$V/tx.npy" --steps "$steps" --log "$log" \
        --log-every 1 --save "$ck" "$@" >"$log.out" 2>&1 || { bad "vae $*"; tail -n 3 "$log.out"; return 1; }
}
OMP_NUM_THREADS=1 vae "$V/long.jsonl" "$V/long.safetensors" 150 --eval-every 150 --seed 3 &&
    $PY - "$V/long.jsonl" <<'PYEOF' || fail=1
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first = next(o["loss"] for o in L if o.get("step") == 1 and "eval" not in o)
ev = [o["eval"]["loss"] for o in L if "eval" in o][-1]
print(f"  loss at step 1 {first:.2f}, eval loss after 150 steps {ev:.2f} ({ev / first:.0%})")
sys.exit(0 if ev < 0.4 * first else "  the VAE did not learn: eval loss not under 40% of the first")
PYEOF
for th in 1 2; do
    OMP_NUM_THREADS=$th vae "$V/full$th.jsonl" "$V/full$th.safetensors" 30 --eval-every 15 --seed 3
done
OMP_NUM_THREADS=1 vae "$V/again.jsonl" "$V/again.safetensors" 30 --eval-every 15 --seed 3 &&
    same ckpt "$V/full1.safetensors" "$V/again.safetensors" && same log "$V/full1.jsonl" "$V/again.jsonl" &&
    cmp -s <(grep eval "$V/full1.jsonl") <(grep eval "$V/again.jsonl") && echo "  same seed: same bits" ||
    bad "two runs with seed 3 differ"
same ckpt "$V/full1.safetensors" "$V/full2.safetensors"
cmp -s <(grep eval "$V/full1.jsonl") <(grep eval "$V/full2.jsonl") || bad "eval differs at 2 threads"
OMP_NUM_THREADS=1 vae "$V/a.jsonl" "$V/a.safetensors" 15 --eval-every 15 --seed 3 &&
    OMP_NUM_THREADS=2 vae "$V/b.jsonl" "$V/b.safetensors" 30 --eval-every 15 --resume "$V/a.safetensors" &&
    same ckpt "$V/full1.safetensors" "$V/b.safetensors" && same log "$V/full1.jsonl" "$V/a.jsonl" &&
    same log "$V/full1.jsonl" "$V/b.jsonl" &&
    cmp -s <(grep eval "$V/full1.jsonl") <(cat "$V/a.jsonl" "$V/b.jsonl" | grep eval) &&
    echo "  15 steps at 1 thread + 15 resumed at 2 = 30 at 1 = 30 at 2" || bad "resumed VAE differs"
# another seed, same weights and data order: only the noise differs
for s in 1 2; do
    vae "$V/s$s.jsonl" "$V/s$s.safetensors" 5 --init "$V/a.safetensors" --no-shuffle --seed $s
done
if $PY tests/py/same.py ckpt "$V/s1.safetensors" "$V/s2.safetensors" >/dev/null 2>&1; then
    bad "seeds 1 and 2 trained the same weights"
else
    echo "  seeds 1 and 2 (same weights, same data order): different weights"
fi
for v in z mu logvar; do
    "$V/vae" --resume "$V/full1.safetensors" --predict image="$V/tx.npy" --output $v --out "$V/$v.npy" \
        >/dev/null || bad "--predict --output $v"
done
"$V/vae" --resume "$V/full1.safetensors" --predict image="$V/tx.npy" --output z --out "$V/z2.npy" >/dev/null &&
    cmp -s "$V/z.npy" "$V/z2.npy" || bad "--predict z twice: different files"
check vae "$V/z.npy" "$V/mu.npy" "$V/logvar.npy" "$V/plan.json" 3 30 128
# PyTorch twin of examples/vae.mp: tests/py/vae_twin.py, float32, Adam, from
# the same weights and fed rng.py's noise
P=$V/torch
mkdir -p "$P"
cp "$V/x.npy" "$P/"
$PY tests/py/vae_twin.py init "$P" && "$MPCC" examples/vae.mp --precision float32 --dump-plan=json >"$P/plan.json" &&
    build_trainer examples/vae.mp "$P/vae" --precision float32 &&
    "$P/vae" --data image="$P/x.npy" --init "$P/init.safetensors" --no-shuffle --seed 4 --steps 6 \
        --log-every 1 --log "$P/twin.jsonl" --save "$P/twin.safetensors" >"$P/out" 2>&1 &&
    $PY tests/py/vae_twin.py check "$P" 4 || bad "examples/vae.mp against PyTorch's VAE"

# ---- 3. the CUDA program in the CPU stand-in ----------------------------------
echo "== 3. rng_twin's CUDA program (CPU stand-in) against the twin and the C program"
E=$W/emu
mkdir -p "$E"
cp "$T/plan.json" "$T/init.safetensors" "$T/x.npy" "$E/"
emu_trainer tests/models/rng_twin.mp "$E/t"
case $? in
0)
    twin "$E/t" "$E" 6 --init "$T/init.safetensors" --seed 5 && check twin "$E" 5
    for v in e u; do
        "$E/t" --resume "$T/twin.safetensors" --predict x="$T/x.npy" --output $v --out "$E/$v.npy" >/dev/null &&
            cmp "$T/$v.npy" "$E/$v.npy" && echo "  --predict $v: the C program's bytes" ||
            bad "CUDA program's --predict $v differs from the C program's"
    done
    # the VAE's captured steps and evaluations as the C program's
    rm -f "$E/vae.c.jsonl" "$E/vae.emu.jsonl"
    vdata=(--data image="$V/tx.npy" --eval image="$V/tx.npy" --no-shuffle --steps 4 --log-every 1 --eval-every 2)
    emu_trainer examples/vae.mp "$E/vae" && "$V/vae" "${vdata[@]}" --log "$E/vae.c.jsonl" >/dev/null 2>&1 &&
        MP_EMU=graph "$E/vae" "${vdata[@]}" --log "$E/vae.emu.jsonl" >"$E/vae.emu.out" 2>&1 &&
        $PY tests/cuda/compare_logs.py "$E/vae.c.jsonl" "$E/vae.emu.jsonl" 2e-3 &&
        echo "  examples/vae.mp: 4 steps and 2 evaluations as the C program's" ||
        bad "examples/vae.mp's CUDA program differs from the C program"
    ;;
2) ;;
*) fail=1 ;;
esac

# ---- 4. data parallel ------------------------------------------------------------
echo "== 4. 2 ranks x accumulate 2 against the twin with 4 micro-batches"
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
    M=$W/mpi
    mkdir -p "$M"
    cp "$T/plan.json" "$T/init.safetensors" "$T/x.npy" "$M/"
    "$MPCC" tests/models/rng_twin.mp --target c -o "$M/t.c" && mpicc -O2 -DMP_USE_MPI -o "$M/t" "$M/t.c" -lm &&
        twin "mpirun --oversubscribe -np 2 $M/t" "$M" 6 \
            --init "$T/init.safetensors" --seed 5 && check twin "$M" 5 4 || bad "data-parallel rng_twin"
else
    echo "SKIP: no mpicc / mpirun"
fi
exit $fail
