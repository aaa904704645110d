#!/usr/bin/env bash
# run_all: once (the optimizer pass is the runtime's, after the step, which fusion does not change; both builds of each case share one generated C: make test-nofuse skips it)
# t_optim_pass.sh - the step's one optimizer pass (mp_train.h mp_optim_pass)
# writes the lowp working copies as it updates the f32 values, so the next
# step skips cast_params(), and Adam runs on AVX2 vectors where the CPU
# has them. Each trainer is built twice from the same generated C: as mpcc
# writes it, and with the working copies' registration (MpParam.work_dt
# lines of setup()) taken out, which makes every step run cast_params() as
# before; the second runs with MP_CPU=portable (the scalar loops). Built
# with -O3 -march=native, where the compiler contracts products into FMAs
# (on the vectors as on the scalars, or the results would differ). The
# pass, with 1 and with 2 threads, must agree with the reference bit for
# bit (checkpoint and every logged step) on models with what the pass must
# get right: batch norm's running statistics and buffers (not trained,
# copies still written), no_decay, AdamW, Adam with L2 decay, SGD with
# Nesterov momentum, clipping, accumulation, and steps skipped by the loss
# scale (ls_overflow: no update, so the copies are not fresh).
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mnist_first train 512 "$W/x.npy" "$W/y.npy" || exit 1
fail=0
cc_opt=(-O3 -march=native -fopenmp)
# name model precision steps
check() {
    local name=$1 model=$2 prec=$3 steps=$4 th
    build_trainer "$model" "$W/$name" --precision "$prec" -- "${cc_opt[@]}" || { fail=1; return; }
    if ! grep -q '\.work_dt = MP_[FB]' "$W/$name.c"; then
        echo "FAIL $name: setup() registers no working copy"; fail=1; return
    fi
    grep -v '\.work_dt = \|\.work = ' "$W/$name.c" >"$W/${name}_ref.c"
    cc "${cc_opt[@]}" -o "$W/${name}_ref" "$W/${name}_ref.c" -lm || { fail=1; return; }
    # the reference with 2 threads, the pass with 2 and 1
    for b in "${name}_ref:2:portable" "$name:2:auto" "$name:1:auto"; do
        IFS=: read -r bin th cpu <<<"$b"
        MP_CPU=$cpu OMP_NUM_THREADS=$th "$W/$bin" --data image="$W/x.npy" --data label="$W/y.npy" \
            --steps "$steps" --seed 3 --log "$W/$bin.$th.jsonl" --log-every 1 \
            --save "$W/$bin.$th.safetensors" >"$W/$bin.$th.out" 2>&1 ||
            { echo "FAIL $bin ($th threads):"; tail -n 3 "$W/$bin.$th.out"; fail=1; return; }
    done
    for th in 2 1; do
        $PY tests/py/same.py ckpt "$W/$name.$th.safetensors" "$W/${name}_ref.2.safetensors" || fail=1
        $PY tests/py/same.py log "$W/$name.$th.jsonl" "$W/${name}_ref.2.jsonl" || fail=1
    done
    echo "ok $name ($prec, $steps steps)"
}
check cnn_bn tests/models/cnn_bn.mp mixed_float16 12
check accum tests/models/resume_accum.mp mixed_bfloat16 12
check buffer tests/models/mlp_buffer.mp mixed_float16 12
check overflow tests/models/ls_overflow.mp mixed_float16 30
sed 's/adam(lr = 1e-3)/adam(lr = 1e-3, weight_decay = 0.05)/' tests/models/ls_overflow.mp >"$W/adam_l2.mp"
grep -q 'weight_decay = 0.05' "$W/adam_l2.mp" || { echo "FAIL: no adam_l2 model"; fail=1; }
check adam_l2 "$W/adam_l2.mp" mixed_bfloat16 12
# the overflow run must have skipped steps, else it tests nothing of them
grep -q '"skipped": *[1-9]' "$W/overflow.1.jsonl" || { echo "FAIL ls_overflow skipped no step"; fail=1; }
[ $fail -eq 0 ] && echo "PASS t_optim_pass" || echo "FAIL t_optim_pass"
exit $fail
