#!/usr/bin/env bash
# t_fp8_train.sh - the C program under mixed_float8 (PRECISION.md
# "Additions: TF32 and FP8"; runtime/mp_fp8.h, compiler/emit_c.c):
#   1. tests/models/mlp_small.mp (Adam, 40 steps, hidden layer quantised:
#      x and w e4m3, dy e5m2) under delayed(amax_history = 4, margin = 1)
#      and current(margin = 0) against its PyTorch twin, which quantises as
#      the spec says (tests/py/models.py Fp8Scales, LinearFp8; ref.py
#      --emulate fp8): per-step losses within 5e-5, trained tensors within
#      1e-2 of their change, the evaluation, and every scale's exponent
#      equal; negative controls: the same run against the mixed_bfloat16
#      twin, and a delayed run against the current twin, both fail;
#   2. the log carries the scales' range (text and JSON);
#   3. resume is exact: 20 steps, then 20 more from the checkpoint, give
#      the 40-step run's checkpoint bytes (the histories and exponents are
#      in it); a checkpoint that lost them is refused by name (exit 1, as
#      any bad checkpoint), so are an exponent that is not an integer and
#      a history of another length; one of the mixed_bfloat16 program starts the
#      scales afresh, and that program resumes a mixed_float8 one;
#   4. the program in two parts (MP_PART_*) trains to the whole program's
#      bytes (the quantised product's scales cross the parts), and
#      --gradcheck keeps products exact (its differences pass);
#   5. a non-finite step is skipped (counted in the log), as under loss
#      scaling;
#   6. the CUDA target writes the program: the C program's scale slots,
#      an amax per slot, each product's operands quantised (its runs:
#      t_cuda_emu.sh section 11);
#   7. data parallel: 2 ranks (mpirun) train as one process with accumulate
#      2, their amaxes reduced (skipped without mpicc / mpirun).
# The conversions themselves: t_fp8.sh (ml_dtypes, every pattern).
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
ok() { echo "ok   $*"; }
W=$tmp
D=$W/data
"$PY" tests/py/data.py "$D" >/dev/null || exit 1
ARGS=(--data "image=$D/mnist_x.npy" --data "label=$D/mnist_y.npy" --eval "image=$D/mnist_ex.npy"
      --eval "label=$D/mnist_ey.npy")
variant() {     # variant NAME PRECISION [FP8-LINE]
    sed "s/^  optimizer = .*/  optimizer = adam(lr = 1e-3)\n  precision = $2${3:+\n  $3}/" \
        tests/models/mlp_small.mp >"$W/$1.mp"
}
variant delayed mixed_float8 "fp8 = delayed(amax_history = 4, margin = 1)"
variant current mixed_float8 "fp8 = current(margin = 0)"
variant bf16 mixed_bfloat16
"$PY" tests/py/ref.py init "$W/delayed.mp" "$W/init.safetensors" || exit 1
run() {     # run NAME STEPS [options...]: the NAME program, logs in $W/NAME.*
    local n=$1 s=$2; shift 2
    "$W/$n" "${ARGS[@]}" --steps "$s" --no-shuffle --log "$W/$n.jsonl" --log-every 1 \
        --eval-every "$s" "$@" >"$W/$n.run" 2>&1
}

# ---- 1. against the twin ---------------------------------------------------------
for v in delayed current bf16; do
    build_trainer "$W/$v.mp" "$W/$v" || exit 1
    run "$v" 40 --init "$W/init.safetensors" --save "$W/$v.safetensors" ||
        { bad "the $v program's run"; tail -n 5 "$W/$v.run"; }
done
check() {   # check PROGRAM EMULATE [MODEL] -> ref.py's verdict (0: agree)
    "$PY" tests/py/ref.py check "$W/${3:-$1}.mp" "${ARGS[@]}" --steps 40 --init "$W/init.safetensors" \
        --log "$W/$1.jsonl" --ckpt "$W/$1.safetensors" --tol 5e-5 --etol 5e-5 --dtype float32 \
        --emulate "$2" >"$W/$1.$2.${3:-$1}.ref" 2>&1
}
for v in delayed current; do
    check "$v" fp8 && ok "mixed_float8 $v: C program = twin: $(grep -m1 worst "$W/$v.fp8.$v.ref"); $(grep -m1 'fp8:' "$W/$v.fp8.$v.ref")" ||
        { bad "mixed_float8 $v: the C program against its twin"; grep -E "MISMATCH|worst|Error" "$W/$v.fp8.$v.ref" | head -n 5; }
done
check delayed bf16 && bad "negative control: the mixed_float8 program agrees with the mixed_bfloat16 twin" ||
    ok "negative control: the mixed_float8 program differs from the mixed_bfloat16 twin"
check delayed fp8 current && bad "negative control: the delayed program agrees with the current twin" ||
    ok "negative control: delayed scaling differs from current scaling"

# ---- 2. the log --------------------------------------------------------------------
grep -qE '^step 40/40 .* fp8_scale 2\^-?[0-9]+\.\.2\^-?[0-9]+$' "$W/delayed.run" &&
    grep -q '"step":40,.*"fp8_exp_min":-\?[0-9]*,"fp8_exp_max":-\?[0-9]*}' "$W/delayed.jsonl" &&
    ! grep -q fp8 "$W/bf16.jsonl" && ok "the log shows the scales' range (text and JSON), only under mixed_float8" ||
    bad "the log's fp8 fields"

# ---- 3. resume -----------------------------------------------------------------------
run delayed 20 --init "$W/init.safetensors" --save "$W/half.safetensors" &&
    run delayed 40 --resume "$W/half.safetensors" --save "$W/resumed.safetensors" ||
    { bad "the 20 + 20 runs"; tail -n 3 "$W/delayed.run"; }
cmp -s "$W/resumed.safetensors" "$W/delayed.safetensors" &&
    ok "resume: 20 + 20 steps = 40 steps, checkpoint bytes (scales and histories included)" ||
    bad "resume: the resumed run's checkpoint differs from the 40-step run's"
"$PY" - "$W" <<'EOF' || bad "could not write the checkpoints without the scales"
import sys
sys.path.insert(0, "tests/py")
import st
w = sys.argv[1]
t, meta = st.read(f"{w}/half.safetensors", with_meta=True)
st.write(f"{w}/lost.safetensors", {k: v for k, v in t.items() if not k.startswith("fp8.")}, meta)
t["fp8.scale_exp"] = t["fp8.scale_exp"] - 20  # 2^-20 x the scales: values underflow
st.write(f"{w}/moved.safetensors", t, meta)
t["fp8.scale_exp"][0] = 0.5                   # not an exponent
st.write(f"{w}/half_exp.safetensors", t, meta)
EOF
run delayed 40 --resume "$W/half_exp.safetensors"; rc=$?
[ $rc = 1 ] && grep -q "half_exp.safetensors: tensor 'fp8.scale_exp' element 0 is 0.5, expected an integer in \[-63, 63\]" "$W/delayed.run" &&
    ok "a scale exponent that is not an integer: refused by name, exit 1" ||
    { bad "a non-integer scale exponent (exit $rc)"; tail -n 2 "$W/delayed.run"; }
# the current program keeps one history row: the delayed checkpoint's 4 do not fit
run current 40 --resume "$W/half.safetensors"; rc=$?
[ $rc = 1 ] && grep -q "tensor 'fp8.amax_history' has shape 4x3, the model's is 1x3" "$W/current.run" &&
    ok "an amax history of another length: refused, both shapes named, exit 1" ||
    { bad "a history of another length (exit $rc)"; tail -n 2 "$W/current.run"; }
run delayed 40 --resume "$W/moved.safetensors" --save "$W/moved40.safetensors" &&
    ! cmp -s "$W/moved40.safetensors" "$W/delayed.safetensors" &&
    ok "control: a resumed run whose scales were made 2^20 x smaller ends elsewhere (the scales are read)" ||
    bad "control: shrinking the checkpoint's scales changed nothing"
run delayed 40 --resume "$W/lost.safetensors"; rc=$?
[ $rc = 1 ] && grep -q "lost.safetensors: no tensor 'fp8.amax_history'" "$W/delayed.run" &&
    ok "a mixed_float8 checkpoint without its scales: refused by name, exit 1" ||
    { bad "a checkpoint without the scales (exit $rc)"; tail -n 2 "$W/delayed.run"; }
run bf16 20 --init "$W/init.safetensors" --save "$W/bf16half.safetensors" &&
    run delayed 21 --resume "$W/bf16half.safetensors" &&
    grep -q '"step":21,.*"fp8_exp_min"' "$W/delayed.jsonl" &&
    ok "a mixed_bfloat16 checkpoint resumes under mixed_float8, the scales afresh" ||
    { bad "resuming a mixed_bfloat16 checkpoint"; tail -n 2 "$W/delayed.run"; }
run bf16 21 --resume "$W/half.safetensors" && grep -q '"step":21,' "$W/bf16.jsonl" &&
    ok "a mixed_float8 checkpoint resumes under mixed_bfloat16, its scales unread" ||
    { bad "resuming a mixed_float8 checkpoint under mixed_bfloat16"; tail -n 2 "$W/bf16.run"; }

# ---- 4. two parts, --gradcheck ---------------------------------------------------------
if cc -O1 -DMP_PART_RUNTIME -c -o "$W/runtime.o" "$W/delayed.c" &&
    cc -O1 -DMP_PART_MODEL -c -o "$W/model.o" "$W/delayed.c" && cc -o "$W/parts" "$W/runtime.o" "$W/model.o" -lm; then
    run parts 40 --init "$W/init.safetensors" --save "$W/parts.safetensors" || bad "the parts' run"
    cmp -s "$W/parts.safetensors" "$W/delayed.safetensors" &&
        ok "two parts: 40 steps to the whole program's checkpoint bytes" ||
        bad "two parts: the checkpoint differs from the whole program's"
else
    bad "the mixed_float8 program does not build in two parts"
fi
"$W/delayed" --gradcheck >"$W/gc.out" 2>&1 && grep -q 'elements checked' "$W/gc.out" &&
    ok "--gradcheck: products exact, the gradients pass" || { bad "--gradcheck under mixed_float8"; tail -n 4 "$W/gc.out"; }

# ---- 5. a non-finite step -------------------------------------------------------------
# x divided by an input d that is 0 for the first sample only: step 1's
# loss and gradients are not finite; it is skipped, the next steps train
"$PY" - "$D" "$W" <<'EOF' || bad "could not write the divisor"
import sys
import numpy as np
d, w = sys.argv[1:]
n = np.load(f"{d}/mnist_x.npy").shape[0]
v = np.ones((n, 1), np.float32)
v[0] = 0
np.save(f"{w}/div.npy", v)
EOF
sed 's|^x      = f32(image) / 255$|input div: f32[B, 1]\nx      = f32(image) / 255 / div|' "$W/delayed.mp" >"$W/inf.mp"
if build_trainer "$W/inf.mp" "$W/inf"; then
    "$W/inf" --data "image=$D/mnist_x.npy" --data "label=$D/mnist_y.npy" --data "div=$W/div.npy" \
        --steps 3 --no-shuffle --log "$W/inf.jsonl" --log-every 1 >"$W/inf.run" 2>&1
    grep -q '"step":1,"loss":null,.*"skipped":1,' "$W/inf.jsonl" &&
        grep -q '"step":3,"loss":[0-9].*"skipped":1,' "$W/inf.jsonl" &&
        ok "a non-finite step is skipped, the run goes on" ||
        { bad "the non-finite step was not skipped"; tail -n 3 "$W/inf.run"; }
else
    bad "the model with a divisor does not build"
fi

# ---- 7. data parallel -------------------------------------------------------------------
# 2 ranks = one process with accumulate 2 (TRAINER.md): the scales come
# from the amaxes of every rank's micro-batches (an all-reduce max), as one
# process's come from all its micro-batches (tests/py/dp.py's tolerances)
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
    sed 's/^  precision = mixed_float8$/&\n  accumulate = 2/' "$W/delayed.mp" >"$W/acc2.mp"
    if build_trainer "$W/acc2.mp" "$W/acc2" && "$MPCC" "$W/delayed.mp" --target c -o "$W/dp.c" &&
        mpicc -O1 -DMP_USE_MPI -o "$W/dp" "$W/dp.c" -lm; then
        "$W/acc2" "${ARGS[@]}" --steps 20 --no-shuffle --init "$W/init.safetensors" --log "$W/acc2.jsonl" \
            --log-every 1 --save "$W/acc2.safetensors" >"$W/acc2.run" 2>&1 &&
            mpirun --oversubscribe -np 2 "$W/dp" "${ARGS[@]}" --steps 20 --no-shuffle --init "$W/init.safetensors" \
                --log "$W/dp.jsonl" --log-every 1 --save "$W/dp.safetensors" >"$W/dp.run" 2>&1 &&
            "$PY" tests/py/dp.py log "$W/acc2.jsonl" "$W/dp.jsonl" && "$PY" tests/py/dp.py ckpt "$W/acc2.safetensors" "$W/dp.safetensors" &&
            cmp -s <(grep -o '"fp8_exp[^}]*' "$W/acc2.jsonl") <(grep -o '"fp8_exp[^}]*' "$W/dp.jsonl") &&
            ok "2 ranks = one process with accumulate 2 (the scales' range equal at every step)" ||
            { bad "2 ranks against accumulate 2"; tail -n 3 "$W/dp.run"; }
    else
        bad "the data-parallel builds"
    fi
else
    echo "SKIP data parallel: no mpicc / mpirun"
fi

# ---- 6. the CUDA target ------------------------------------------------------------------
# The CUDA program declares the C program's scale slots, takes the amax of
# each where its first product reads it (three here: x, w, dy) and
# quantises every operand of the three products (x and w in the forward,
# dy and x in dw); its runs against the C program are t_cuda_emu.sh's
# section 11.
if "$MPCC" "$W/delayed.mp" -o "$W/delayed.cu" 2>"$W/cu.err" && [ ! -s "$W/cu.err" ]; then
    slots() { sed -n '/^static const unsigned char mp_fp8_fmt/,/^};/p; /^static MpFp8 mp_fp8 = /p' "$1"; }
    [ -n "$(slots "$W/delayed.c")" ] && [ "$(slots "$W/delayed.c")" = "$(slots "$W/delayed.cu")" ] &&
        [ "$(grep -c '^    mp_cu_fp8_observe<' "$W/delayed.cu")" = 3 ] &&
        [ "$(grep -c '^    const uint16_t \*mp_q[01] = mp_cu_fp8_quant<' "$W/delayed.cu")" = 4 ] &&
        ok "--target cuda: the C program's scale slots, 3 amaxes, 4 quantised operands" ||
        bad "the CUDA program's scales or quantised operands"
else
    bad "mpcc --target cuda under mixed_float8"; cat "$W/cu.err"
fi
exit $fail
