#!/usr/bin/env bash
# run_all: once (CI's time allows the CUDA builds and the stand-in for the default, fused program only: make test-nofuse skips it; MPCC_NO_FUSE=1 ONLY=t_cuda make test runs them unfused)
# t_cuda_work.sh - the CUDA program's optimizer pass (mp_cuda_step.h
# MpCuUpdate) writes each parameter's f16/bf16 working copy as it updates
# the f32 value, so the step casts the parameters only once after the
# masters come from the host (start, --resume, --init), not every step.
# Run through the CPU stand-in (tests/cuda/mp_cuda_emu.h), each CUDA program
# is built twice from the same generated file: as mpcc writes it, and with
# its working-copy table (mp_cu_work) saying MP_WORK_OTHER for every copy,
# which makes every captured step run model_cast_params as before. The two
# must agree bit for bit (checkpoint and every logged step) on models with
# what the pass must get right: f16 and bf16 copies, a buffer with a copy
# (not trained: its copy is written, never updated), no_decay, AdamW, Adam
# with L2 decay, SGD with Nesterov momentum, batch norm, accumulation,
# steps skipped by the loss scale (no update, copies as they were),
# evaluations between steps, and a run resumed from a checkpoint. Mutants
# whose pass does not write the copy, or that skip the first cast, must be
# caught.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
[ -n "$CXX" ] || { echo "SKIP: no C++ compiler: the CUDA program cannot run on the CPU here"; exit 0; }
mnist_first train 512 "$W/x.npy" "$W/y.npy" || exit 1
fail=0
emu_cc() {   # emu_cc NAME: $W/NAME.cu -> $W/NAME
    "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$W/$1.cu" \
        -o "$W/$1" -lm 2>"$W/$1.build" || { echo "FAIL $1 does not build:"; head -n 20 "$W/$1.build"; return 1; }
}
# run BIN TAG STEPS [options]: a logged run of the stand-in, its checkpoint $W/BIN.TAG.st
run() {
    local bin=$1 tag=$2 steps=$3
    shift 3
    MP_EMU=graph "$W/$bin" --data image="$W/x.npy" --data label="$W/y.npy" --eval image="$W/x.npy" \
        --eval label="$W/y.npy" --eval-every 5 --steps "$steps" --log "$W/$bin.$tag.jsonl" \
        --log-every 1 --save "$W/$bin.$tag.st" "$@" >"$W/$bin.$tag.out" 2>&1 ||
        { echo "FAIL $bin ($tag):"; tail -n 3 "$W/$bin.$tag.out"; return 1; }
}
same() {   # same A B TAG: the two runs' checkpoints and logs bit for bit
    $PY tests/py/same.py ckpt "$W/$1.$3.st" "$W/$2.$3.st" && $PY tests/py/same.py log "$W/$1.$3.jsonl" "$W/$2.$3.jsonl"
}
# check NAME MODEL PRECISION STEPS: the pass against the cast of every step
check() {
    local name=$1 model=$2 prec=$3 steps=$4
    "$MPCC" "$model" --precision "$prec" -o "$W/$name.cu" 2>"$W/$name.err" ||
        { echo "FAIL mpcc $model:"; head -n 5 "$W/$name.err"; fail=1; return 1; }
    if ! grep -q '^    {MP_B\?F16, [0-9]*}, /\* ' "$W/$name.cu"; then
        echo "FAIL $name: mp_cu_work registers no working copy"; fail=1; return 1
    fi
    sed 's/^    {MP_B\?F16, \([0-9]*\)}, \/\* /    {MP_WORK_OTHER, \1}, \/* /' "$W/$name.cu" >"$W/${name}_ref.cu"
    emu_cc "$name" && emu_cc "${name}_ref" || { fail=1; return 1; }
    for b in "$name" "${name}_ref"; do run "$b" a "$steps" --seed 3 || { fail=1; return 1; }; done
    same "$name" "${name}_ref" a || { fail=1; return 1; }
    echo "ok $name ($prec, $steps steps)"
}
check buffer tests/models/mlp_buffer.mp mixed_float16 12
check cnn_bn tests/models/cnn_bn.mp mixed_float16 8
check accum tests/models/resume_accum.mp mixed_bfloat16 8
check overflow tests/models/ls_overflow.mp mixed_float16 30
grep -q '"skipped": *[1-9]' "$W/overflow.a.jsonl" || { echo "FAIL ls_overflow skipped no step"; fail=1; }
sed 's/adam(lr = 1e-3)/adam(lr = 1e-3, weight_decay = 0.05)/' tests/models/ls_overflow.mp >"$W/adam_l2.mp"
grep -q 'weight_decay = 0.05' "$W/adam_l2.mp" || { echo "FAIL: no adam_l2 model"; fail=1; }
# a buffer read by a bf16 matmul: a working copy of a parameter not trained
cat >"$W/buf_mm.mp" <<'EOF'
model buf_mm
input image: u8[64, 784]
input label: i32[64]
buffer mix: [32, 32] = constant(0.02)
h      = relu(linear(f32(image) / 255, 32))
g      = matmul(h, mix) + h
logits: f32 = linear(g, 10)
loss   = cross_entropy(logits, label)
train {
  optimizer = adamw(lr = 2e-3, weight_decay = 0.1, no_decay = [vectors])
  minimize loss
}
EOF
if check adam_l2 "$W/adam_l2.mp" mixed_bfloat16 12 && check buf_mm "$W/buf_mm.mp" mixed_bfloat16 12; then
    grep -q '{MP_BF16, [0-9]*}, /\* mix ' "$W/buf_mm.cu" || { echo "FAIL buf_mm: the buffer has no working copy"; fail=1; }
    # resumed: the masters come from the checkpoint, cast once before the first step
    for b in buf_mm buf_mm_ref; do run "$b" r 20 --resume "$W/buf_mm_ref.a.st" || fail=1; done
    same buf_mm buf_mm_ref r && echo "ok buf_mm resumed" || fail=1
fi
# mutants of the overflow model's program, each must differ from the reference
mutant() {   # mutant NAME WHAT SED
    sed "$3" "$W/overflow.cu" >"$W/$1.cu"
    if cmp -s "$W/overflow.cu" "$W/$1.cu"; then
        echo "FAIL mutant $1: the mutation did not apply"; fail=1
    elif ! emu_cc "$1" || ! run "$1" a 30 --seed 3; then
        fail=1
    elif same "$1" overflow_ref a >"$W/$1.same" 2>&1; then
        echo "FAIL mutant $1 ($2) not caught"; fail=1
    else
        echo "ok mutant $1 ($2) caught: $(grep -m 1 DIFF "$W/$1.same")"
    fi
}
if [ -x "$W/overflow" ]; then
    mutant no_copy "the pass leaves the working copies as they were" \
        's/mp_cu_st(w, tl\.work_dt, i - tl\.start, p\[i\]);/(void)0;/'
    mutant no_first_cast "no cast before the first step" 's/mp_cu\.work_stale = 1; /mp_cu.work_stale = 0; /'
fi
[ $fail -eq 0 ] && echo "PASS t_cuda_work" || echo "FAIL t_cuda_work"
exit $fail
