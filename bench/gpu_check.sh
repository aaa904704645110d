#!/usr/bin/env bash
# gpu_check.sh - correctness of the CUDA target on a real GPU (issue 4's
# validation; CI, without a GPU, runs tests/t_cuda_build.sh and
# tests/t_cuda_emu.sh instead). Needs ./mpcc, nvcc, cc, a GPU, python3 with
# numpy. Every failure is printed and makes the exit status 1:
#   1. every tests/gradcheck model, built with nvcc -O3, passes --gradcheck
#      on the GPU (float32, TF32 off: the real kernels and cuBLAS calls
#      against finite differences);
#   2. every example, from the same seed's initial values (the two targets
#      draw them alike) and --no-shuffle, 40 steps: the first step's loss
#      equals the C program's, 1e-4 relative under float32 (TF32 off), 5e-2
#      under its own mixed policy; every later loss and evaluation within
#      5e-2 (cuBLAS sums in another order, and training amplifies the
#      difference: the first GPU run saw 1e-4 by step 28 in float32, and a
#      mixed model skip a step on one side only), or within 4 times what
#      the C program's own run from parameters nudged by one ulp of their
#      working precision (bench/nudge.py) parts from its first run by then: a training that
#      turns a last-bit difference into 6% in 8 steps (mobilenetv2 at lr
#      0.05 on random labels) parts from the GPU's as fast; the same with
#      MP_CUDA_GRAPH=0 (kernels one by one);
#   3. checkpoints: GPU -> CPU -> GPU continue as one C run;
#   4. compute-sanitizer: memcheck on every example (graphs and eager),
#      racecheck, synccheck and initcheck on mnist_cnn and char_transformer:
#      "ERROR SUMMARY: 0 errors" each (racecheck: no hazard outside cuBLAS's
#      own kernels; initcheck with MP_CUBLAS=off, the built-in product: it
#      does not see the stores of cuBLAS's sm_90 kernels, and reports every
#      read of a product's result as uninitialized);
#   5. GPT-2 small (GPT2=path, default examples/gpt2.mp, when it exists):
#      the device memory it needs, its attention on Tensor Cores
#      (mp_cuda_flash.h), 2 steps as the C program's (5e-2), then
#      GPT2_STEPS steps for speed (see the section for its parameters);
#      the same under mixed_float8 (GPT2_F8=0: not), its products through
#      cuBLASLt's FP8 ones and again as bf16 products (MP_CUDA_FP8=bf16),
#      and mnist_mlp and char_transformer under mixed_float8 in (2) and
#      memcheck.
# Writes bench/out/check/. Takes about 6 minutes on an H200 with 16 cores
# (133 s there with the programs built ahead: the second GPU run).
#
# PREBUILD=1 does, on a machine without a GPU, everything that needs none:
# it builds every program (nvcc for ARCH's machine code alone, no PTX, so
# the binaries are small) and runs the C programs' side of (2) and (5),
# then packs bench/out/check into bench/out/carry/check.tar.xz. On the GPU's
# machine, gpu_check.sh unpacks that archive first and reuses what it holds:
# a lent GPU's minutes go to the GPU (bench/gpu_run.sh). PREBUILT_ONLY=1
# skips the programs not built ahead instead of building them there.
# For a short lease: LOSS_GRAPHS=1 (the loss curves with CUDA graphs only),
# SKIP_SAN=1 (no compute-sanitizer).
set -u
cd "$(dirname "$0")/.."
# python3 with numpy: the first of python3 (a GPU machine's has them) and
# /usr/bin/python3 (Debian's packages, where python3 is another one) that has them
PY=${PY:-$(for p in python3 /usr/bin/python3; do "$p" -c 'import numpy' 2>/dev/null && { echo "$p"; break; }; done)}
[ -n "$PY" ] || { echo "gpu_check: no python3 with numpy (set PY)"; exit 2; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ARCH=${ARCH:-sm_90}
out=bench/out/check
PREBUILD=${PREBUILD:-0}
mkdir -p "$out"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
[ -x ./mpcc ] || { echo "gpu_check: ./mpcc is not built (make)"; exit 2; }
if [ "$PREBUILD" = 1 ]; then
    gpu() { return 1; }      # the GPU's steps are skipped
else
    gpu() { return 0; }
    nvidia-smi -L || { echo "gpu_check: no GPU"; exit 2; }
    if [ -f bench/out/carry/check.tar.xz ]; then tar -xJf bench/out/carry/check.tar.xz -C "$out" || exit 2; fi
fi

# ---- building (in parallel) ----------------------------------------------------------
build() {   # build MODEL.mp NAME [mpcc options]; kept when built before (PREBUILD)
    local mp=$1 n=$2
    shift 2
    [ -x "$out/$n.gpu" ] && [ -x "$out/$n.cpu" ] && return
    [ "${PREBUILT_ONLY:-0}" = 1 ] && { echo "skip $n: not built ahead (PREBUILT_ONLY=1)"; return; }
    ./mpcc "$mp" "$@" -o "$out/$n.cu" && ./mpcc "$mp" "$@" --target c -o "$out/$n.c" &&
        "$NVCC" -O3 -gencode "arch=compute_${ARCH#sm_},code=$ARCH" "$out/$n.cu" -o "$out/$n.gpu" \
            >"$out/$n.nvcc" 2>&1 &&
        cc -O2 "$out/$n.c" -o "$out/$n.cpu" -lm || echo "FAIL: $n does not build"
}
export -f build
export NVCC ARCH out
[ "${PREBUILT_ONLY:-0}" = 1 ] && export PREBUILT_ONLY
{
    for f in tests/gradcheck/*.mp; do echo "$f $(basename "$f" .mp) --precision float32"; done
    for f in examples/*.mp; do
        n=$(basename "$f" .mp)
        echo "$f $n"
        echo "$f ${n}_f32 --precision float32"
    done
    for n in mnist_mlp char_transformer; do   # mixed_float8 (runtime/mp_cuda_fp8.h)
        echo "examples/$n.mp ${n}_f8 --precision mixed_float8"
    done
} | xargs -P "$(nproc)" -L 1 bash -c 'build "$@"' _ | tee "$out/builds"
grep -q FAIL "$out/builds" && fail=1

# ---- 1. gradients on the GPU ------------------------------------------------------------
# (eight at a time: one GPU runs several small programs at once)
gc_models=$(for f in tests/gradcheck/*.mp; do n=$(basename "$f" .mp); [ -x "$out/$n.gpu" ] && echo "$n"; done)
if gpu; then
    echo "$gc_models" | xargs -P 8 -I{} sh -c "'$out/{}.gpu' --gradcheck >'$out/{}.gc' 2>&1; echo \$? >'$out/{}.gc.rc'"
    for n in $gc_models; do
        [ "$(cat "$out/$n.gc.rc")" = 0 ] && echo "ok   gradcheck $n" ||
            { bad "gradcheck $n on the GPU:"; tail -n 8 "$out/$n.gc"; }
    done
fi

# ---- data ---------------------------------------------------------------------------------
[ -f "$out/chars.bin" ] || "$PY" - "$out" <<'EOF'
import numpy as np, sys
d, r = sys.argv[1], np.random.RandomState(7)
np.save(d + "/img.npy", r.randint(0, 256, (2048, 784)).astype(np.uint8))
np.save(d + "/img4.npy", r.randint(0, 256, (2048, 1, 28, 28)).astype(np.uint8))
np.save(d + "/lab.npy", r.randint(0, 10, (2048,)).astype(np.int32))
np.save(d + "/pix.npy", (r.rand(2048, 64) * 16).astype(np.float32))
np.save(d + "/tok.npy", r.randint(0, 65, (512, 64)).astype(np.int32))
np.save(d + "/tgt.npy", r.randint(0, 65, (512, 64)).astype(np.int32))
np.save(d + "/img32.npy", r.randint(0, 256, (2048, 1, 32, 32)).astype(np.uint8))
r.randint(0, 65, 1 << 16).astype("<u2").tofile(d + "/chars.bin")
EOF
data_of() {
    local o=${2:---data}
    case $1 in
    mnist_mlp*) echo "$o image=$out/img.npy $o label=$out/lab.npy" ;;
    mnist_cnn*) echo "$o image=$out/img4.npy $o label=$out/lab.npy" ;;
    digits_mlp*) echo "$o pixels=$out/pix.npy $o label=$out/lab.npy" ;;
    char_transformer* | char_gru*) echo "$o tokens=$out/tok.npy $o targets=$out/tgt.npy" ;;
    gpt2* | llama*) echo "$o seq=$out/chars.bin" ;;
    resnet18* | mobilenetv2*) echo "$o image=$out/img32.npy $o label=$out/lab.npy" ;;
    unet*) echo "$o image=$out/img32.npy" ;;
    vae*) echo "$o image=$out/img.npy" ;;
    *) echo "gpu_check: no data for $1" >&2 ;;
    esac
}
compare() { "$PY" tests/cuda/compare_logs.py "$@"; }   # A.jsonl B.jsonl TOL

# ---- 5. GPT-2 small: its device memory, 2 steps as the C program's, then speed ----------
# examples/gpt2.mp with GPT-2 small's sizes written into its constants (B 8,
# T 1024, vocab 50304 (nanoGPT's 50257 padded to a multiple of 64, as
# examples/gpt2.mp's header says; the tokens stay below 50257), width 768,
# 12 heads of 64 (attention on Tensor Cores: checked in MP_CUDA_VERBOSE's
# line), 12 layers, no dropout), trained on
# a random u16 token stream (GPT2_DATA: other --data arguments, e.g. nanoGPT's
# train.bin as seq=FILE), GPT2_STEPS (50) timed steps.
gpt2_check() {
    local steps=${GPT2_STEPS:-50}
    [ -f examples/gpt2.mp ] || { echo "skip GPT-2: examples/gpt2.mp does not exist"; return; }
    sed -e 's/^const B = .*/const B = 8/' -e 's/^const T = .*/const T = 1024/' \
        -e 's/^const V = .*/const V = 50304/' -e 's/^const D = .*/const D = 768/' \
        -e 's/^const H = .*/const H = 12/' -e 's/^const L = .*/const L = 12/' \
        -e 's/^const P = .*/const P = 0.0/' examples/gpt2.mp >"$out/gpt2s.mp"
    build "$out/gpt2s.mp" gpt2s --precision mixed_float16 | tee -a "$out/builds"
    [ -x "$out/gpt2s.gpu" ] || return
    [ -f "$out/gpt2_tok.bin" ] || "$PY" -c "
import numpy as np
np.random.RandomState(3).randint(0, 50257, 1 << 20).astype('<u2').tofile('$out/gpt2_tok.bin')"
    local d=${GPT2_DATA:-"--data seq=$out/gpt2_tok.bin"}
    if [ ! -s "$out/gpt2s.cpu.jsonl" ]; then   # the C program's 2 steps, once (PREBUILD: ahead)
        # shellcheck disable=SC2086
        "$out/gpt2s.cpu" $d --no-shuffle --steps 2 --log-every 1 --log "$out/gpt2s.cpu.jsonl" >/dev/null 2>&1 ||
            { bad "GPT-2: the C program's 2 steps failed"; rm -f "$out/gpt2s.cpu.jsonl"; return; }
    fi
    gpu || return 0
    # shellcheck disable=SC2086
    "$out/gpt2s.gpu" $d --dry-run 2>&1 | tee "$out/gpt2s.dry"
    # shellcheck disable=SC2086
    MP_CUDA_VERBOSE=1 "$out/gpt2s.gpu" $d --no-shuffle --steps 2 --log-every 1 --log "$out/gpt2s.gpu.jsonl" \
        >/dev/null 2>"$out/gpt2s.err" || { bad "GPT-2: a run failed:"; cat "$out/gpt2s.err"; return; }
    grep "^cuda:" "$out/gpt2s.err"
    grep -q "attention on Tensor Cores" "$out/gpt2s.err" ||
        bad "GPT-2: its f16 attention did not run on Tensor Cores (ARCH=$ARCH: sm_80 or later)"
    if msg=$(compare "$out/gpt2s.cpu.jsonl" "$out/gpt2s.gpu.jsonl" 5e-2 2>&1); then
        echo "ok   GPT-2: 2 steps as the C program's, $msg"
    else
        bad "GPT-2: $msg"
    fi
    # shellcheck disable=SC2086
    "$out/gpt2s.gpu" $d --steps "$steps" --log-every 10 >"$out/gpt2s.speed" 2>&1 ||
        { bad "GPT-2: $steps steps failed:"; tail -n 5 "$out/gpt2s.speed"; return; }
    echo "GPT-2 small on the GPU (samples/s of 1024 tokens):"
    tail -n 3 "$out/gpt2s.speed"
    local dev=h100   # the cost model's prediction, to set beside the measured step
    nvidia-smi -L | grep -q H200 && dev=h200
    nvidia-smi -L | grep -q A100 && dev=a100
    echo "GPT-2 small predicted (mpcc --dump-plan=cost --gpu $dev):"
    ./mpcc "$out/gpt2s.mp" --precision mixed_float16 --dump-plan=cost --gpu $dev | tail -n 4
    gpt2_f8 "$d" "$steps"
}
# GPT-2 small under mixed_float8 (GPT2_F8=0: not): 2 steps against the C
# program's, then the same timed steps (gpu_bench.sh's FP8 row)
gpt2_f8() {   # gpt2_f8 DATA STEPS
    local d=$1 steps=$2
    [ "${GPT2_F8:-1}" = 1 ] || return 0
    build "$out/gpt2s.mp" gpt2s_f8 --precision mixed_float8 | tee -a "$out/builds"
    [ -x "$out/gpt2s_f8.gpu" ] || return
    if [ ! -s "$out/gpt2s_f8.cpu.jsonl" ]; then
        # shellcheck disable=SC2086
        "$out/gpt2s_f8.cpu" $d --no-shuffle --steps 2 --log-every 1 --log "$out/gpt2s_f8.cpu.jsonl" >/dev/null 2>&1 ||
            { bad "GPT-2 mixed_float8: the C program's 2 steps failed"; rm -f "$out/gpt2s_f8.cpu.jsonl"; return; }
    fi
    gpu || return 0
    # shellcheck disable=SC2086
    "$out/gpt2s_f8.gpu" $d --no-shuffle --steps 2 --log-every 1 --log "$out/gpt2s_f8.gpu.jsonl" \
        >/dev/null 2>"$out/gpt2s_f8.err" || { bad "GPT-2 mixed_float8: a run failed:"; cat "$out/gpt2s_f8.err"; return; }
    if msg=$(compare "$out/gpt2s_f8.cpu.jsonl" "$out/gpt2s_f8.gpu.jsonl" 5e-2 2>&1); then
        echo "ok   GPT-2 mixed_float8: 2 steps as the C program's, $msg"
    else
        bad "GPT-2 mixed_float8: $msg"
    fi
    # shellcheck disable=SC2086
    "$out/gpt2s_f8.gpu" $d --steps "$steps" --log-every 10 >"$out/gpt2s_f8.speed" 2>&1 ||
        { bad "GPT-2 mixed_float8: $steps steps failed:"; tail -n 5 "$out/gpt2s_f8.speed"; return; }
    echo "GPT-2 small under mixed_float8 on the GPU (samples/s of 1024 tokens):"
    grep "note: mixed_float8" "$out/gpt2s_f8.speed"
    tail -n 3 "$out/gpt2s_f8.speed"
    # the same with the products as bf16 products of the quantised values
    # shellcheck disable=SC2086
    MP_CUDA_FP8=bf16 "$out/gpt2s_f8.gpu" $d --no-shuffle --steps 2 --log-every 1 \
        --log "$out/gpt2s_f8b.gpu.jsonl" >/dev/null 2>&1 &&
        msg=$(compare "$out/gpt2s_f8.cpu.jsonl" "$out/gpt2s_f8b.gpu.jsonl" 5e-2 2>&1) &&
        echo "ok   GPT-2 mixed_float8 (MP_CUDA_FP8=bf16): 2 steps as the C program's, $msg" ||
        bad "GPT-2 mixed_float8 (MP_CUDA_FP8=bf16): ${msg:-the run failed}"
    # shellcheck disable=SC2086
    MP_CUDA_FP8=bf16 "$out/gpt2s_f8.gpu" $d --steps "$steps" --log-every 10 >"$out/gpt2s_f8b.speed" 2>&1 &&
        { echo "... with MP_CUDA_FP8=bf16:"; tail -n 3 "$out/gpt2s_f8b.speed"; }
}
[ "${GPT2_FIRST:-0}" = 1 ] && gpt2_check

# ---- 2. loss curves against the C program ------------------------------------------------------
ulp_bits() {   # ulp_bits MODEL.mp NAME: the mantissa bits of NAME's working copies (nudge.py)
    local p
    case $2 in
    *_f32) p=float32 ;;
    *_f8) p=mixed_bfloat16 ;;
    *) p=$(sed -n 's/^ *precision *= *\([a-z0-9_]*\).*/\1/p' "$1" | head -n 1) ;;
    esac
    case $p in mixed_float16) echo 10 ;; mixed_bfloat16) echo 7 ;; *) echo 23 ;; esac
}
for f in examples/*.mp; do
    b=$(basename "$f" .mp)
    for n in "$b" "${b}_f32" "${b}_f8"; do
        [ -x "$out/$n.gpu" ] && [ -x "$out/$n.cpu" ] || continue
        tol=5e-2
        [ "$n" = "${b}_f32" ] || [ "$b" = digits_mlp ] && tol=1e-4
        d="$(data_of "$n") $(data_of "$n" --eval)"
        if [ ! -s "$out/$n.cpu.jsonl" ]; then   # the C program's run, once (PREBUILD: ahead)
            # shellcheck disable=SC2086
            "$out/$n.cpu" $d --no-shuffle --steps 40 --log-every 1 \
                --eval-every 20 --log "$out/$n.cpu.jsonl" >/dev/null 2>&1 ||
                { bad "$n: the C program's run failed"; rm -f "$out/$n.cpu.jsonl"; continue; }
        fi
        if [ ! -s "$out/$n.nudged.jsonl" ]; then   # ... and from parameters nudged by an ulp
            # shellcheck disable=SC2086
            "$out/$n.cpu" $d --steps 0 --save "$out/$n.init.st" >/dev/null 2>&1 &&
                "$PY" bench/nudge.py --bits "$(ulp_bits "$f" "$n")" "$out/$n.init.st" "$out/$n.nudged.st" >/dev/null &&
                "$out/$n.cpu" $d --init "$out/$n.nudged.st" --no-shuffle --steps 40 --log-every 1 \
                    --eval-every 20 --log "$out/$n.nudged.jsonl" >/dev/null 2>&1 ||
                { echo "note: $n: no nudged C run (its sensitivity not used)"; rm -f "$out/$n.nudged.jsonl"; }
        fi
        nudged=()
        [ -s "$out/$n.nudged.jsonl" ] && nudged=("$out/$n.nudged.jsonl" 4)
        gpu || continue
        for g in ${LOSS_GRAPHS:-1 0}; do
            # shellcheck disable=SC2086
            MP_CUDA_GRAPH=$g "$out/$n.gpu" $d --no-shuffle --steps 40 \
                --log-every 1 --eval-every 20 --log "$out/$n.gpu.jsonl" >/dev/null 2>"$out/$n.gpu.err" ||
                { bad "$n: a run failed:"; cat "$out/$n.gpu.err"; continue; }
            if msg=$(compare "$out/$n.cpu.jsonl" "$out/$n.gpu.jsonl" $tol 1 5e-2 ${nudged[@]+"${nudged[@]}"} 2>&1); then
                echo "ok   $n (graphs $g): 40 steps as the C program's, $msg"
            else
                bad "$n (graphs $g): $msg"
            fi
        done
    done
done

# ---- 3. checkpoints GPU -> CPU -> GPU ---------------------------------------------------------
for n in mnist_mlp char_transformer; do
    gpu && [ -x "$out/$n.gpu" ] || continue
    d=$(data_of "$n")
    # shellcheck disable=SC2086
    "$out/$n.cpu" $d --steps 12 --log-every 1 --log "$out/$n.straight.jsonl" >/dev/null 2>&1 &&
    "$out/$n.gpu" $d --steps 4 --save "$out/$n.a.safetensors" >/dev/null 2>&1 &&
    "$out/$n.cpu" $d --steps 8 --resume "$out/$n.a.safetensors" --save "$out/$n.b.safetensors" \
        --log-every 1 --log "$out/$n.mixed.jsonl" >/dev/null 2>&1 &&
    "$out/$n.gpu" $d --steps 12 --resume "$out/$n.b.safetensors" --log-every 1 \
        --log "$out/$n.mixed.jsonl" >/dev/null 2>&1 || { bad "$n: checkpoints across devices failed"; continue; }
    tail -n 8 "$out/$n.straight.jsonl" >"$out/$n.tail.jsonl"
    msg=$(compare "$out/$n.tail.jsonl" "$out/$n.mixed.jsonl" 5e-2 2>&1) &&
        echo "ok   $n: GPU -> CPU -> GPU checkpoints, $msg" || bad "$n: checkpoints: $msg"
done

# ---- 4. compute-sanitizer ------------------------------------------------------------------------
if ! gpu || [ "${SKIP_SAN:-0}" = 1 ]; then
    :
elif [ -x "$SAN" ]; then
    san() {   # san TOOL NAME GRAPHS: one run, its log $out/NAME.TOOL.gGRAPHS.log
        local tool=$1 n=$2 g=$3
        [ -x "$out/$n.gpu" ] || return
        # shellcheck disable=SC2046
        MP_CUBLAS=$([ "$tool" = initcheck ] && echo off) MP_CUDA_GRAPH=$g \
            "$SAN" --tool "$tool" --error-exitcode 99 "$out/$n.gpu" $(data_of "$n") --steps 3 \
            >"$out/$n.$tool.g$g.log" 2>&1
    }
    export -f san data_of
    export SAN
    {   # (six at a time)
        for f in examples/*.mp; do echo "memcheck $(basename "$f" .mp) 1"; echo "memcheck $(basename "$f" .mp) 0"; done
        echo "memcheck char_transformer_f8 1"
        for n in mnist_cnn char_transformer; do
            for tool in racecheck synccheck initcheck; do echo "$tool $n 0"; done
        done
    } >"$out/san.list"
    xargs -P 6 -L 1 bash -c 'san "$@"' _ <"$out/san.list"
    while read -r tool n g; do
        [ -x "$out/$n.gpu" ] || continue
        log=$out/$n.$tool.g$g.log
        # racecheck's summary reads "RACECHECK SUMMARY: 0 hazards displayed
        # (0 errors"; the hazards it reports inside cuBLAS's own kernels (the
        # first GPU run: a split-K nvjet kernel's reads and writes of its
        # partial sums, 432 hazards) are not this program's
        ours=$(grep -E "^========= +(at|and .* access at|Error: Race reported between .* access at) " "$log" |
            grep -cvE "(at|access at) (nvjet_|cutlass|sm[0-9]+_xmma|gemm)")
        if grep -qE "(ERROR|RACECHECK) SUMMARY: 0 (errors|hazards displayed \(0 errors)" "$log"; then
            echo "ok   compute-sanitizer --tool $tool $n MP_CUDA_GRAPH=$g"
        elif [ "$tool" = racecheck ] && [ "$ours" = 0 ] && grep -q "Race reported" "$log"; then
            echo "ok   compute-sanitizer --tool $tool $n MP_CUDA_GRAPH=$g ($(grep -c 'Race reported' "$log") hazards, all inside cuBLAS's kernels)"
        else
            bad "compute-sanitizer --tool $tool $n MP_CUDA_GRAPH=$g:"; tail -n 30 "$out/$n.$tool.g$g.log"
        fi
    done <"$out/san.list"
else
    bad "compute-sanitizer not found"
fi

[ "${GPT2_FIRST:-0}" = 1 ] || gpt2_check
if [ "$PREBUILD" = 1 ]; then   # what the GPU's machine unpacks (bench/gpu_run.sh carries it)
    mkdir -p bench/out/carry
    (cd "$out" && tar -cJf ../carry/check.tar.xz --exclude='*.cu' --exclude='*.c' --exclude='*.nvcc' \
        --exclude='*.o' ./*.gpu ./*.cpu ./*.jsonl ./*.npy ./*.bin ./*.mp ./builds) || fail=1
    ls -l bench/out/carry/check.tar.xz
fi
exit $fail
