#!/usr/bin/env bash
# t_tf32.sh - float32_matmul = "tf32" and --float32-matmul (PRECISION.md,
# "TF32 for float32 products"; compiler/prec.c prec_tf32):
#   1. the plan (every model under tf32 keeps PRECISION.md's rules:
#      t_plan_rules.sh, check_plan.py check_tf32): digits_mlp's products
#      and only they compute tf32; the train-block key gives the option's plan, --float32-matmul ieee
#      overrides it; the text, dot, html and cost forms show it (cost: the
#      TF32 Tensor Core rate, so a product-bound step is predicted faster);
#   2. errors: a bad train-block value (file:line:col, exit 1), a bad
#      option value (exit 2);
#   3. the C program (tests/models/mlp_small.mp under float32, Adam, 40
#      steps) against its PyTorch twin whose products round their operands
#      to TF32 (tests/py/models.py LinearTf32, ref.py --emulate tf32): the
#      per-step losses within 5e-5, the trained tensors within 1e-2; two
#      negative controls: the same log against the plain twin, and the
#      ieee program against the TF32 twin, both fail;
#   3b. the program built in two parts (runtime/mp_model.h, MP_PART_*)
#      trains to the whole program's checkpoint bytes and --gradcheck
#      prints its numbers (TF32 and the exact switch cross the parts);
#   3c. every runtime variable at file scope is MP_STATE, const, or named
#      as one part's (a static copy per part would split its value);
#   4. the CUDA program run on the CPU (the stand-in of t_cuda_emu.sh, its
#      cuBLAS in TF32 mode): per-step losses equal the C program's within
#      3e-5 (sums in another order), and differ from the ieee C program's.
# The rounding itself: tests/kernels_torch.py case_tf32 (10^7 values against
# a nearest-even reference, through the GEMM's packing too) in
# t_kernels_torch.sh.
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# ---- 1. the plan ------------------------------------------------------------
# (every model's plan under tf32 against PRECISION.md's rules: t_plan_rules.sh)
# digits_mlp: both linears and their gradients' products are tf32, nothing else
sed 's/^  precision = float32$/&\n  float32_matmul = "tf32"/' examples/digits_mlp.mp >"$W/digits_tf32.mp"
"$MPCC" "$W/digits_tf32.mp" --dump-plan=json >"$W/key.json" &&
    "$MPCC" examples/digits_mlp.mp --float32-matmul tf32 --dump-plan=json >"$W/opt.json" &&
    "$MPCC" "$W/digits_tf32.mp" --float32-matmul ieee --dump-plan=json >"$W/ieee.json" &&
    "$MPCC" examples/digits_mlp.mp --dump-plan=json >"$W/plain.json" || bad "digits_mlp: mpcc failed"
"$PY" - "$W" <<'EOF' || fail=1
import json, sys
w = sys.argv[1]
key, opt, ieee, plain = (json.load(open(f"{w}/{n}.json")) for n in ("key", "opt", "ieee", "plain"))
errs = []
tf = sorted((n["phase"], n["op"]) for n in key["nodes"] if n["compute"] == "tf32")
want = sorted([("forward", "linear")] * 2 + [("backward", "matmul")] + [("backward", "matmul_tn")] * 2)
if tf != want:
    errs.append(f"tf32 nodes {tf}, want {want}")
if key["float32_matmul"] != "tf32" or key["summary"]["tf32_ops"] != 5:
    errs.append("the json's float32_matmul / summary tf32_ops")
for name, p in (("the option's", opt),):
    if [n["compute"] for n in p["nodes"]] != [n["compute"] for n in key["nodes"]]:
        errs.append(f"{name} plan differs from the train block's")
for name, p in (("--float32-matmul ieee", ieee), ("the default", plain)):
    if "float32_matmul" in p or any(n["compute"] == "tf32" for n in p["nodes"]):
        errs.append(f"{name}: tf32 in the plan")
    if [n["compute"] for n in p["nodes"]] != [n["compute"].replace("tf32", "f32") for n in key["nodes"]]:
        errs.append(f"{name}: computes differ from the tf32 plan's other than tf32")
print("\n".join("FAIL digits_mlp plan: " + e for e in errs) or "ok   digits_mlp: the key, the option and ieee")
sys.exit(1 if errs else 0)
EOF
"$MPCC" "$W/digits_tf32.mp" --dump-plan >"$W/p.txt" 2>&1
grep -qE '^ +[0-9]+ +13 +- +linear +lowp +class +tf32 ' "$W/p.txt" &&
    grep -q 'float32_matmul tf32: products computing in f32' "$W/p.txt" &&
    grep -q '5 products on TF32 operands' "$W/p.txt" && ok "text plan shows tf32" || bad "text plan: no tf32"
"$MPCC" "$W/digits_tf32.mp" --dump-plan=dot >"$W/p.dot" 2>&1
[ "$(grep -c 'fillcolor="#a1d99b"' "$W/p.dot")" = 5 ] && grep -q 'tf32 green' "$W/p.dot" &&
    ok "dot: the five tf32 products green" || bad "dot: tf32 products not green"
"$MPCC" "$W/digits_tf32.mp" --dump-plan=html >"$W/p.html" 2>&1
grep -q '"compute": "tf32"' "$W/p.html" && ok "html carries compute tf32" || bad "html: no tf32"
# cost: a product-bound model (the char transformer's 128-wide products
# at batch 64 x 256) predicted faster with TF32 on an H100, its products
# at the tf32 rate
ct=(examples/char_transformer.mp --precision float32 --dump-plan=cost-json --gpu h100)
"$MPCC" "${ct[@]}" --float32-matmul tf32 >"$W/c_tf32.json" && "$MPCC" "${ct[@]}" >"$W/c_f32.json" ||
    bad "cost: mpcc failed"
"$PY" - "$W" <<'EOF' || fail=1
import json, sys
w = sys.argv[1]
t, f = (json.load(open(f"{w}/c_{n}.json")) for n in ("tf32", "f32"))
errs = []
prod = [o for o in t["ops"] if o["op"] in ("linear", "matmul", "matmul_tn")]
if not prod or any(o["compute"] != "tf32" for o in prod):
    errs.append("products not at the tf32 rate")
if any(o["compute"] == "tf32" for o in t["ops"] if o["op"] in ("attention", "layer_norm", "add")):
    errs.append("a non-GEMM op at the tf32 rate")
if t["step"]["peak_type"] != "tf32" or f["step"]["peak_type"] != "f32":
    errs.append("peak types %s / %s" % (t["step"]["peak_type"], f["step"]["peak_type"]))
if not t["step"]["time_s"] < f["step"]["time_s"]:
    errs.append("tf32 step %g s not faster than f32 %g s" % (t["step"]["time_s"], f["step"]["time_s"]))
if t["step"]["flops"] != f["step"]["flops"]:
    errs.append("the FLOPs differ")
print("\n".join("FAIL cost: " + e for e in errs) or "ok   cost: tf32 products at the TF32 rate, step faster")
sys.exit(1 if errs else 0)
EOF

# ---- 2. errors ------------------------------------------------------------------
sed 's/^  precision = float32$/&\n  float32_matmul = "fp16"/' examples/digits_mlp.mp >"$W/bad1.mp"
sed 's/^  precision = float32$/&\n  float32_matmul = tf32/' examples/digits_mlp.mp >"$W/bad2.mp"
"$MPCC" "$W/bad1.mp" --target c -o "$W/bad1.c" 2>"$W/e1"; rc1=$?
"$MPCC" "$W/bad2.mp" --target c -o "$W/bad2.c" 2>"$W/e2"; rc2=$?
[ $rc1 = 1 ] && grep -q "bad1.mp:21:20: error: unknown float32_matmul \"fp16\", expected \"ieee\" or \"tf32\"" "$W/e1" &&
    [ ! -e "$W/bad1.c" ] && ok "bad float32_matmul value: file:line:col, exit 1" ||
    { bad "bad float32_matmul value (exit $rc1)"; cat "$W/e1"; }
[ $rc2 = 1 ] && grep -q "bad2.mp:21:20: error: float32_matmul must be the string \"ieee\" or \"tf32\"" "$W/e2" &&
    ok "float32_matmul not a string: file:line:col, exit 1" || { bad "float32_matmul = tf32 (exit $rc2)"; cat "$W/e2"; }
"$MPCC" examples/digits_mlp.mp --float32-matmul fast 2>"$W/e3"; rc3=$?
"$MPCC" examples/digits_mlp.mp --float32-matmul 2>"$W/e4"; rc4=$?
[ $rc3 = 2 ] && grep -q "unknown --float32-matmul 'fast', expected ieee or tf32" "$W/e3" &&
    [ $rc4 = 2 ] && grep -q -- "--float32-matmul needs a value" "$W/e4" &&
    ok "bad --float32-matmul: usage error, exit 2" || { bad "--float32-matmul fast ($rc3) / none ($rc4)"; cat "$W/e3" "$W/e4"; }

# ---- 3. the C program against its TF32 twin ---------------------------------------
D=$W/data
"$PY" tests/py/data.py "$D" >/dev/null || exit 1
for v in tf32 ieee; do
    sed "s/^  optimizer = .*/  optimizer = adam(lr = 1e-3)\n  precision = float32\n  float32_matmul = \"$v\"/" \
        tests/models/mlp_small.mp >"$W/mlp_$v.mp"
done
"$PY" tests/py/ref.py init "$W/mlp_tf32.mp" "$W/init.safetensors" || exit 1
ARGS="--data image=$D/mnist_x.npy --data label=$D/mnist_y.npy --eval image=$D/mnist_ex.npy --eval label=$D/mnist_ey.npy"
for v in tf32 ieee; do
    # shellcheck disable=SC2086
    "$MPCC" "$W/mlp_$v.mp" --target c -o "$W/$v.c" && cc -O1 -o "$W/$v" "$W/$v.c" -lm &&
        "$W/$v" $ARGS --steps 40 --no-shuffle --init "$W/init.safetensors" --log "$W/$v.jsonl" \
            --log-every 1 --eval-every 40 --save "$W/$v.safetensors" >"$W/$v.run" 2>&1 ||
        { bad "the $v C program"; tail -n 5 "$W/$v.run"; }
done
grep -q 'mp_gemm_tf32 = 1;' "$W/tf32.c" && ! grep -q 'mp_gemm_tf32 = 1;' "$W/ieee.c" ||
    bad "the C programs: mp_gemm_tf32 set in the wrong one"
check() {   # check LOG-STEM EMULATE|"" -> ref.py's verdict (0 agree)
    local em=()
    [ -n "$2" ] && em=(--emulate "$2")
    # shellcheck disable=SC2086
    "$PY" tests/py/ref.py check "$W/mlp_tf32.mp" $ARGS --steps 40 --init "$W/init.safetensors" \
        --log "$W/$1.jsonl" --ckpt "$W/$1.safetensors" --tol 5e-5 --etol 5e-5 --dtype float32 \
        "${em[@]}" >"$W/$1.$2.ref" 2>&1
}
check tf32 tf32 && ok "C program (tf32) = PyTorch twin on TF32 operands: $(grep -m1 worst "$W/tf32.tf32.ref")" ||
    { bad "C program (tf32) against the TF32 twin"; grep -E "MISMATCH|worst|Error" "$W/tf32.tf32.ref" | head -n 5; }
check tf32 "" && bad "negative control: the tf32 program agrees with the plain twin" ||
    ok "negative control: the tf32 program differs from the plain twin"
check ieee tf32 && bad "negative control: the ieee program agrees with the TF32 twin" ||
    ok "negative control: the ieee program differs from the TF32 twin"

# ---- 3b. the C program in two parts (runtime/mp_model.h, MP_PART_*) ---------------
# The tests' compile cache builds optimised programs so (tests/cc_cache.sh).
# TF32 is switched on by the model's part (model_setup: mp_gemm_tf32) and
# off for --gradcheck by the runtime's (mp_gemm_exact); both are read by
# the product in the runtime's part: the parts' program trains to the
# whole one's bytes and checks gradients with its numbers. The whole
# builds bypass the cache (MP_CC_CACHE=0); the control, a program whose
# runtime part leaves mp_gemm_exact alone, shows --gradcheck's output
# would see it.
sed 's/^\(    mp_gemm_exact = \)1;/\10;/' "$W/tf32.c" >"$W/noexact.c"
if MP_CC_CACHE=0 cc -O1 -o "$W/whole" "$W/tf32.c" -lm && MP_CC_CACHE=0 cc -O1 -o "$W/noexact" "$W/noexact.c" -lm &&
    cc -O1 -DMP_PART_RUNTIME -c -o "$W/runtime.o" "$W/tf32.c" &&
    cc -O1 -DMP_PART_MODEL -c -o "$W/model.o" "$W/tf32.c" && cc -o "$W/parts" "$W/runtime.o" "$W/model.o" -lm; then
    for p in whole parts; do
        # shellcheck disable=SC2086
        "$W/$p" $ARGS --steps 40 --no-shuffle --init "$W/init.safetensors" --save "$W/$p.safetensors" \
            >"$W/$p.run" 2>&1 || { bad "the $p program's run"; tail -n 5 "$W/$p.run"; }
    done
    for p in whole parts noexact; do "$W/$p" --gradcheck >"$W/$p.gc" 2>&1; done
    cmp -s "$W/whole.safetensors" "$W/parts.safetensors" &&
        ok "two parts (tf32): 40 steps to the whole program's checkpoint bytes" ||
        bad "two parts (tf32): the checkpoint differs from the whole program's"
    cmp -s "$W/whole.gc" "$W/parts.gc" && grep -q 'elements checked' "$W/whole.gc" &&
        ok "two parts (tf32): --gradcheck prints the whole program's numbers" ||
        { bad "two parts (tf32): --gradcheck differs from the whole program's"; diff "$W/whole.gc" "$W/parts.gc" | head -n 6; }
    cmp -s "$W/whole.gc" "$W/noexact.gc" &&
        bad "control: --gradcheck with TF32 products prints the same numbers" ||
        ok "control: --gradcheck with TF32 products prints other numbers"
else
    bad "the tf32 C program does not build whole and in two parts"
fi

# ---- 3c. what the two parts share ------------------------------------------------------
# A runtime variable that one part writes and the other reads must be one
# variable (MP_STATE): a `static` one is a copy in each part, and the
# reader's copy keeps its first value, or is folded to it (the CUDA
# program's mp_dist once was: on rank 1 of 2 its loss note took no
# micro-batch for the step's first, and the logged loss summed up over the
# steps; t_mpi caught it). So every variable at file scope in runtime/ that
# is not const is MP_STATE, or one of these: written and read by one part
# only, or a cache each part fills alike.
one_part="mp_stop_signal mp_cpu_level_v"   # the step loop's signal flag; the CPU's level (cpuid, MP_CPU)
loose=$(awk '/^static / && !/\(/ && !/[ \t]const[ \t]/ {
                 d = $0; sub(/[ \t]*(=|;|\[).*/, "", d); n = split(d, w, /[ \t*]+/)
                 print FILENAME ":" FNR ": " w[n] }' runtime/*.h |
        while IFS= read -r l; do [[ " $one_part " == *" ${l##* } "* ]] || echo "$l"; done)
[ -z "$loose" ] && ok "two parts: every runtime variable at file scope is MP_STATE, const, or one part's" ||
    bad "two parts: runtime variables neither MP_STATE nor const (a copy in each part): $loose"

# ---- 4. the CUDA program (the stand-in) against the C program -----------------------
CXX=${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}
if [ -z "$CXX" ]; then
    echo "SKIP the stand-in: no C++ compiler"
elif "$MPCC" "$W/mlp_tf32.mp" -o "$W/tf32.cu" &&
        "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$W/tf32.cu" \
            -o "$W/tf32.emu" -lm 2>"$W/emu.err"; then
    # shellcheck disable=SC2086
    "$W/tf32.emu" $ARGS --steps 40 --no-shuffle --init "$W/init.safetensors" --log "$W/emu.jsonl" \
        --log-every 1 --eval-every 40 >"$W/emu.run" 2>&1 || { bad "the stand-in's run"; tail -n 5 "$W/emu.run"; }
    "$PY" tests/cuda/compare_logs.py "$W/emu.jsonl" "$W/tf32.jsonl" 3e-5 >"$W/cmp" 2>&1 &&
        ok "stand-in (cuBLAS TF32 mode) = C program: $(tail -n 1 "$W/cmp")" ||
        { bad "stand-in against the C program"; cat "$W/cmp"; }
    "$PY" tests/cuda/compare_logs.py "$W/emu.jsonl" "$W/ieee.jsonl" 3e-5 >/dev/null 2>&1 &&
        bad "negative control: the stand-in agrees with the ieee C program" ||
        ok "negative control: the stand-in differs from the ieee C program"
else
    bad "the CUDA program does not build for the CPU"; head -n 20 "$W/emu.err"
fi

[ $fail = 0 ] && echo "all float32_matmul checks passed"
exit $fail
