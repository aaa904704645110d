#!/usr/bin/env bash
# fuse_mlp.sh - per-step time of the generated C trainer with and without
# fusion (compiler/fuse.c), for bench/mnist_mlp2.mp (784-512-512-10, batch
# 128, Adam) under float32 and mixed_float16. Not part of `make test`.
#
#   bench/fuse_mlp.sh          THREADS=2 STEPS=400 REPEAT=3 by default
#
# Built with cc -O3 -march=native -fopenmp; synthetic data (the time of a
# step does not depend on the values). A step's time is (wall of STEPS
# steps - wall of 50 steps) / (STEPS - 50), so start-up cancels out; the
# best of REPEAT (the machine may be shared). Also counts the passes over
# memory one training step makes in the model's code: kernel calls and
# fused loops in forward, backward and cast_params (the optimizer's one
# pass per parameter comes on top, the same in both).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
THREADS=${THREADS:-2}
STEPS=${STEPS:-400}
REPEAT=${REPEAT:-3}
W=build/bench-fuse
mkdir -p "$W"
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=passive
model=bench/mnist_mlp2.mp
"$MPCC" $model --dump-plan=json >"$W/plan.json"
DATA=$($PY tests/py/synth_data.py "$W/plan.json" $model "$W" 8)

wall() {   # wall BIN N: seconds of an N-step run
    local t0 t1
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$1" $DATA --steps "$2" --log-every 100000 >/dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

# passes: kernel calls and fused loops of one step in the model's code
passes() {
    sed -n '/^static void model_cast_params/,/^static MpInput\|^static const MpValue/p' "$1" |
        grep -cE '^    (mp_k_[a-z0-9_]*\(|\{ /\* fused)'
}

bins=()
for prec in float32 mixed_float16; do
    for f in no-fuse fuse; do
        build_trainer $model "$W/mlp_${prec}_$f" --precision $prec --$f -- -O3 -march=native -fopenmp
        bins+=("$W/mlp_${prec}_$f")
    done
done
# the programs take turns, so that a disturbance of the machine falls on all
for _ in $(seq "$REPEAT"); do
    for bin in "${bins[@]}"; do
        short=$(wall "$bin" 50)
        long=$(wall "$bin" "$STEPS")
        echo "$bin $(echo "($long - $short) * 1000 / ($STEPS - 50)" | bc -l)"
    done
done >"$W/times"
echo "| precision | fusion | ms / step (best of $REPEAT) | passes / step |"
echo "| --- | --- | ---: | ---: |"
for bin in "${bins[@]}"; do
    best=$(awk -v b="$bin" '$1 == b { print $2 }' "$W/times" | sort -g | head -n 1)
    name=${bin##*/mlp_}
    printf '| %s | %s | %.2f | %d |\n' "${name%_*}" "${name##*_}" "$best" "$(passes "$bin.c")"
done
