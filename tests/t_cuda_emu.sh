#!/usr/bin/env bash
# run_all: once (CI's time allows the CUDA builds and the stand-in for the default, fused program only: make test-nofuse skips it; MPCC_NO_FUSE=1 ONLY=t_cuda make test runs them unfused)
# t_cuda_emu.sh - the CUDA program's own code, run on the CPU (CI has no
# GPU): each train.cu is compiled as C++ with -DMP_CU_EMU and
# tests/cuda/mp_cuda_emu.h standing in for the CUDA runtime, so its
# functors (every kernel's arithmetic), its launchers, cuBLAS's arguments,
# the arena, the device loss scaling and optimizer, the graph capture and
# replay and the input pipeline all run, and are compared with the C
# program and with finite differences:
#   1. every tests/gradcheck model: --gradcheck (host mode: forward and
#      backward on the "device", gradients brought back);
#   2. each example (and tests/cuda/emu_options.mp: SGD Nesterov, weight
#      decay, accumulate 2, clipping, warm-up, dropout, bf16; emu_buffers.mp:
#      buffers, no_decay groups, the nanoGPT warm-up; emu_wide.mp: wide
#      bias gradients, wide products; emu_columns.mp (also under float32):
#      channel sums read down columns (batch_norm and its gradients, bias
#      gradients), their row slices, the split path of reductions, and the
#      trained parameters equal the C program's (a batch_norm weight
#      gradient 0.1% off is caught there); emu_mid.mp (also under
#      float32): softmax, log_softmax, their gradients, sum, mean and
#      sum_to over a middle axis of inner size 1, 3, 16, 40, 100 (tiles of
#      columns), parameters checked as emu_columns' (three mutants caught);
#      tests/models/mbconv.mp (also under float32 with SGD in place of its
#      Adam, parameters checked so): depthwise, grouped, dilated, "same"
#      convolutions and conv1d;
#      emu_additions.mp: rope,
#      emu_rnn.mp (also under float32, parameters checked): gru, lstm,
#      rms_norm and the other additions, ignored targets; emu_select.mp:
#      comparisons, where, masked_fill, detach, zeros / ones / full, u8
#      masks next to f16 values; emu_route.mp (also under float32,
#      parameters checked as emu_columns'): topk, one_hot, gather, cumsum;
#      emu_split.mp:
#      chunk, slice, concat, expand, arange, integer ids among them;
#      emu_mask.mp (also under float32): attention's mask, scale and
#      dropout;
#      emu_image.mp (also under float32): conv_transpose2d, pad, upsample;
#      emu_rmsprop.mp: RMSprop's three state buffers (parameters checked,
#      and a checkpoint passed between the programs);
#      emu_flash.mp (also under float32): attention's tiled kernels past
#      one tile, causal and not, cross attention, head sizes 16 and 64) on synthetic
#      data with --no-shuffle: the logged loss of every step and the eval
#      loss and metrics equal the C program's (1e-4 relative in float32,
#      2e-3 in mixed precision), loss scale and skipped counts exactly;
#      the same without graph capture, and with the batches gathered on
#      the host instead of on the device; mnist_cnn and char_transformer
#      also under float32;
#   3. checkpoints: C saves at step 3, CUDA resumes to 6 and saves, C
#      resumes to 8: the losses equal one C run of 8 steps;
#   3b. tests/cuda/emu_buffers.mp: buffers loaded by --init (values the
#      initialisers would not give) reach the device and come back unchanged
#      in the checkpoint, the parameters trained; both programs agree;
#   4. tests/cuda/emu_nan.mp: the loss-scale collapse and --check-numerics
#      stop at the same step with the same message as the C program;
#   5. no device: "no CUDA device: ..." and exit 1; device memory too
#      small: one line naming the MiB and exit 1; MpDevice.bytes (the
#      figure --dry-run prints) equals the run's one allocation;
#   6. a graceful first run, each fallback injected (MP_EMU_FAIL): a failed
#      capture and cuBLAS NOT_SUPPORTED give one note and the C program's
#      curve; a too-old driver one clear line; a kernel's or a product's
#      fault (eager or in a replayed graph) names the kernel, its op and
#      model line under MP_CUDA_SYNC=1, and without it blames no kernel
#      ("an earlier kernel failed") and points at MP_CUDA_SYNC=1;
#   7. the stand-in's own checks (threads as fibers, permuted items, device
#      memory closed to host code, queued streams, capture refusals) each
#      catch a mutant that passes the old way (tests/cuda/emu_mutants.cu),
#      and four mutants of a whole program are caught (the last: the
#      update pass writing no working copy);
#   8. attention's tiled kernels against the C program's, kernel by kernel
#      (tests/cuda/emu_attention.cu), and two flash bugs caught there: no
#      barrier after a key tile is staged in shared memory (passes with one
#      thread per block), the running sum not rescaled when the max grows;
#      the Tensor Core kernels (mp_cuda_flash.h: mma.sync through the
#      stand-in's PTX fragment layout) there too, their mma counts and
#      FLOPs, and seven of their mutants caught (fragment layouts in the
#      kernel and in the stand-in, rescaling, the backward's dv and D);
#   9. the copies by words (tests/cuda/emu_copies.cu): transposes, chunks,
#      slices, concat, slice_grad and linear's bias rows byte for byte
#      against the host, taken where words qualify and declined where they
#      do not; three mutants caught;
#  10. recomputation: every example and tests/models model at the smallest
#      memory budget its plan names, fused and unfused, trains 2 steps to
#      the same log and checkpoint bytes as without a budget.
#  11. mixed_float8: the quantised products, scales and checkpoints equal
#      the C program's (tests/models/mlp_small.mp, delayed and
#      current scaling; graph, eager, host mode), resume is exact,
#      --gradcheck passes, three mutants are caught; char_transformer
#      follows its C program.
#  12. bench/nudge.py and compare_logs.py's envelope (bench/gpu_check.sh's
#      rule for trainings that part from themselves).
# The builds are most of its time: the runtime part every program shares
# is compiled once, into precompiled headers, and the small models (runs
# of milliseconds) and the mutants are built at -O0 (see "building").
# Skipped (exit 0) only when there is no C++ compiler.
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
CXX=${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}
if [ -z "$CXX" ]; then
    echo "SKIP: no C++ compiler (g++): the CUDA program cannot be run on the CPU here"
    exit 0
fi
# The -O0 builds (most of them, see "building") by clang++ where it is
# installed: it compiles this code at -O0 in half g++'s time, and what it
# builds runs as fast (measured); -O1 stays with CXX
CXX0=${CXX0:-$(command -v clang++ || echo "$CXX")}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# ---- building: CUDA programs as C++ for the CPU, C programs as C ------------
# Every CUDA program's runtime part (from its first line of code to the
# start of its model part, `#ifndef MP_PART_RUNTIME`) is the same text, so
# a program is built in two parts (runtime/mp_model.h) as the compile
# cache builds a C program: the runtime part (mnist_mlp's) is compiled
# once at -O0 and -O1 ($tmp/rt-cu-O1.o), and into a precompiled header
# for the model parts ($tmp/rt-cu-O1.h.gch: the stand-in, then the runtime
# text, under -DMP_PART_MODEL); a build compiles the program's model part
# after it (its header comment moved there) and links the two. A program
# whose runtime part differs (a mutant's) is built whole; the compiler
# reads the header's text where it cannot use its .gch (.pch). A C
# program is built as a user builds it: under tests/run_all.sh the
# compile cache compiles its runtime's part once per option set
# (tests/cc_cache.sh).
rt_split() {   # rt_split PROGRAM: its runtime part in PROGRAM.rt, the rest in PROGRAM.model.EXT
    local first k
    first=$(grep -n -m 1 '^#' "$1" | cut -d: -f1)
    k=$(grep -n -m 1 '^#ifndef MP_PART_RUNTIME' "$1" | cut -d: -f1)
    [ -n "$first" ] && [ -n "$k" ] && [ "$first" -lt "$k" ] || return 1
    sed -n "$first,$((k - 1))p" "$1" >"$1.rt"
    sed -n "1,$((first - 1))p; $k,\$p" "$1" >"$1.model.${1##*.}"
}
rt_build() {   # rt_build PROGRAM OUT RT 'WHOLE' COMPILER OPTIONS...: in two parts (RT's), else whole (with WHOLE's options)
    local src=$1 out=$2 rt=$3 whole=$4 model
    shift 4
    model=$src.model.${src##*.}
    if [ -e "$tmp/$rt.h" ] && [ -e "$tmp/$rt.o" ] && rt_split "$src" && cmp -s "$src.rt" "$tmp/rt.${src##*.}.rt"; then
        case " $* " in
        *" -fsyntax-only "*) "$@" -DMP_PART_MODEL -include "$tmp/$rt.h" "$model" ;;
        *) "$@" -DMP_PART_MODEL -include "$tmp/$rt.h" "$model" -c -o "$out.o" &&
            "$1" "$out.o" "$tmp/$rt.o" -o "$out" -lm ;;
        esac
    else
        # shellcheck disable=SC2086
        "$@" $whole "$src" -o "$out" -lm
    fi
}
# -O1 for the programs whose runs are long or many (gc_deep: a gradient
# check of some 9,000 small convolutions, 30 s at -O1, 120 s at -O0), -O0
# (a third of g++ -O1's time with clang++; runs a few times slower) for
# the others: the small models here (a run of milliseconds) and the
# gradient checks; -fsyntax-only for the examples that no part below runs
# (the CUDA program of each must compile: CI has no nvcc)
opt_of() {   # opt_of NAME
    case $1 in
    mnist_mlp | mnist_cnn* | char_transformer* | mbconv* | emu_flash* | emu_split | gc_deep) echo -O1 ;;
    gpt2 | llama | resnet18 | mobilenetv2 | unet | vae | char_gru) echo -fsyntax-only ;;
    *) echo -O0 ;;
    esac
}
cxx_of() { [ "$1" = -O1 ] && echo "$CXX" || echo "$CXX0"; }   # cxx_of OPT
emu_build() {   # emu_build MODEL.mp NAME [mpcc options]
    local mp=$1 name=$2 opt
    shift 2
    opt=$(opt_of "$name")
    "$MPCC" "$mp" "$@" -o "$tmp/$name.cu" 2>"$tmp/$name.err" &&
        rt_build "$tmp/$name.cu" "$tmp/$name.emu" "rt-cu${opt/-fsyntax-only/-O0}" "-include tests/cuda/mp_cuda_emu.h" \
            "$(cxx_of $opt)" -std=c++17 $opt -x c++ -DMP_CU_EMU 2>>"$tmp/$name.err" ||
        { echo "FAIL $name: the CUDA program does not build for the CPU"; head -n 20 "$tmp/$name.err"; }
}
c_build() {
    local mp=$1 name=$2 opt
    shift 2
    opt=$(opt_of "$name")
    [ "$opt" = -fsyntax-only ] && return   # run by no part below
    "$MPCC" "$mp" --target c "$@" -o "$tmp/$name.c" 2>"$tmp/$name.cerr" &&
        cc $opt "$tmp/$name.c" -o "$tmp/$name.c.out" -lm 2>>"$tmp/$name.cerr" ||
        { echo "FAIL $name: the C program does not build"; head -n 20 "$tmp/$name.cerr"; }
}
export -f opt_of cxx_of rt_split rt_build emu_build c_build
export MPCC CXX CXX0 tmp
start=$(date +%s)
# the precompiled runtime parts, from mnist_mlp's programs (a header that
# does not build is left as text)
if "$MPCC" examples/mnist_mlp.mp -o "$tmp/rt.cu" 2>"$tmp/rt.err" && rt_split "$tmp/rt.cu"; then
    { echo "#include \"$PWD/tests/cuda/mp_cuda_emu.h\""; cat "$tmp/rt.cu.rt"; } >"$tmp/rt-cu-O0.h"
    cp "$tmp/rt-cu-O0.h" "$tmp/rt-cu-O1.h"
fi
# (clang's precompiled header is FILE.pch, GCC's FILE.gch; a header or
# runtime object that does not build is left out: builds are whole then)
pch_of() { case $(basename "$1") in clang*) echo pch ;; *) echo gch ;; esac; }   # pch_of COMPILER
emu_part() {   # emu_part OUTPUT COMPILER OPTIONS... INPUT
    [ ! -e "${*: -1}" ] || "${@:2}" -o "$1" 2>>"$tmp/rt.err" || rm -f "$1"
}
export -f emu_part
for o in O0 O1; do
    cxx=$(cxx_of "-$o")
    echo "emu_part $tmp/rt-cu-$o.h.$(pch_of "$cxx") $cxx -std=c++17 -$o -x c++-header -DMP_CU_EMU -DMP_PART_MODEL $tmp/rt-cu-$o.h"
    echo "emu_part $tmp/rt-cu-$o.o $cxx -std=c++17 -$o -x c++ -DMP_CU_EMU -include $PWD/tests/cuda/mp_cuda_emu.h -DMP_PART_RUNTIME -c $tmp/rt.cu"
done | xargs -P 2 -L 1 bash -c '"$@"' _
# The parameter check needs SGD: Adam's first step moves a weight by about
# lr whatever its gradient's size, so a gradient of ~0 rounded otherwise
# (another summation order) moves it by a visible fraction of lr.
sed 's/^  optimizer = adam(.*)$/  optimizer = sgd(lr = 0.05)/' tests/models/mbconv.mp >"$tmp/mbconv_sgd.mp"
grep -q "sgd(lr = 0.05)" "$tmp/mbconv_sgd.mp" || bad "mbconv_sgd.mp: the optimizer was not replaced"
{
    for f in tests/gradcheck/*.mp; do echo "emu_build $f $(basename "$f" .mp) --precision float32"; done
    for f in examples/*.mp tests/cuda/emu_*.mp; do
        n=$(basename "$f" .mp)
        echo "emu_build $f $n"
        echo "c_build $f $n"
    done
    for n in mnist_cnn char_transformer; do
        echo "emu_build examples/$n.mp ${n}_f32 --precision float32"
        echo "c_build examples/$n.mp ${n}_f32 --precision float32"
    done
    for n in emu_columns emu_flash emu_mid emu_mask emu_route emu_rnn emu_image; do
        echo "emu_build tests/cuda/$n.mp ${n}_f32 --precision float32"
        echo "c_build tests/cuda/$n.mp ${n}_f32 --precision float32"
    done
    echo "emu_build tests/models/mbconv.mp mbconv"
    echo "c_build tests/models/mbconv.mp mbconv"
    echo "emu_build $tmp/mbconv_sgd.mp mbconv_f32 --precision float32"
    echo "c_build $tmp/mbconv_sgd.mp mbconv_f32 --precision float32"
} | xargs -P 2 -L 1 bash -c '"$@"' _ >"$tmp/builds" 2>&1
cat "$tmp/builds"
grep -q "^FAIL" "$tmp/builds" && fail=1
echo "built in $(( $(date +%s) - start ))s"

# ---- 1. gradients of the device code against finite differences ------------
for f in tests/gradcheck/*.mp; do
    n=$(basename "$f" .mp)
    [ -x "$tmp/$n.emu" ] || continue
    if "$tmp/$n.emu" --gradcheck >"$tmp/$n.gc" 2>&1; then
        echo "ok   gradcheck $n"
    else
        bad "gradcheck $n (CUDA program on the CPU):"; tail -n 8 "$tmp/$n.gc"
    fi
done

# ---- synthetic data for the examples ------------------------------------------
"$PY" - "$tmp" <<'EOF'
import numpy as np, sys
d, r = sys.argv[1], np.random.RandomState(7)
np.save(d + "/img.npy", r.randint(0, 256, (384, 784)).astype(np.uint8))
np.save(d + "/img4.npy", r.randint(0, 256, (192, 1, 28, 28)).astype(np.uint8))
np.save(d + "/lab.npy", r.randint(0, 10, (384,)).astype(np.int32))
np.save(d + "/lab4.npy", r.randint(0, 10, (192,)).astype(np.int32))
np.save(d + "/pix.npy", r.rand(128, 64).astype(np.float32) * 16)
np.save(d + "/lab128.npy", r.randint(0, 10, (128,)).astype(np.int32))
np.save(d + "/tok.npy", r.randint(0, 65, (48, 64)).astype(np.int32))
np.save(d + "/tgt.npy", r.randint(0, 65, (48, 64)).astype(np.int32))
np.save(d + "/x12.npy", r.randn(96, 12).astype(np.float32))
np.save(d + "/y5.npy", r.randint(0, 5, (96,)).astype(np.int32))
np.save(d + "/x4.npy", r.randn(64, 4).astype(np.float32))
np.save(d + "/x8.npy", r.randn(1040, 8).astype(np.float32))
np.save(d + "/y3.npy", r.randint(0, 3, (1040,)).astype(np.int32))
np.save(d + "/tok16.npy", r.randint(0, 16, (48, 8)).astype(np.uint8))
np.save(d + "/tok77.npy", r.randint(0, 16, (16, 77)).astype(np.int32))
np.save(d + "/tgt77.npy", r.randint(0, 16, (16, 77)).astype(np.int32))
y = r.randint(0, 16, (48, 8)).astype(np.int32)
y[r.rand(48, 8) < 0.2] = -100                  # cross_entropy's ignore_index
np.save(d + "/tgt16.npy", y)
np.save(d + "/tok20.npy", r.randint(0, 16, (32, 20)).astype(np.int32))
np.save(d + "/tgt20.npy", r.randint(0, 16, (32, 20)).astype(np.int32))
pad = (np.arange(20)[None, :] < r.randint(1, 21, (32, 1))).astype(np.uint8)
pad[5] = 0                                     # a sample of padding only
np.save(d + "/pad20.npy", pad.reshape(32, 1, 1, 20))
EOF
data_of() {   # data_of NAME [--data|--eval]: the model's input files
    local o=${2:---data}
    case $1 in
    mnist_mlp* | mbconv*) echo "$o image=$tmp/img.npy $o label=$tmp/lab.npy" ;;
    mnist_cnn*) echo "$o image=$tmp/img4.npy $o label=$tmp/lab4.npy" ;;
    digits_mlp*) echo "$o pixels=$tmp/pix.npy $o label=$tmp/lab128.npy" ;;
    char_transformer*) echo "$o tokens=$tmp/tok.npy $o targets=$tmp/tgt.npy" ;;
    emu_options* | emu_buffers* | emu_rmsprop* | emu_mid* | emu_select* | emu_route* | emu_image*) echo "$o x=$tmp/x12.npy $o y=$tmp/y5.npy" ;;
    emu_nan*) echo "$o x=$tmp/x4.npy" ;;
    emu_wide* | emu_columns*) echo "$o x=$tmp/x8.npy $o y=$tmp/y3.npy" ;;
    emu_additions* | emu_rnn*) echo "$o tokens=$tmp/tok16.npy $o targets=$tmp/tgt16.npy" ;;
    emu_split*) echo "$o tokens=$tmp/tok.npy $o targets=$tmp/tgt.npy" ;;
    emu_flash*) echo "$o tokens=$tmp/tok77.npy $o targets=$tmp/tgt77.npy" ;;
    emu_mask*) echo "$o tokens=$tmp/tok20.npy $o pad=$tmp/pad20.npy $o targets=$tmp/tgt20.npy" ;;
    esac
}

compare() { "$PY" tests/cuda/compare_logs.py "$@"; }   # A.jsonl B.jsonl TOL

# ---- 2. loss curves: the CUDA program against the C program -------------------
curve() {   # curve NAME STEPS TOL [env]
    local n=$1 steps=$2 tol=$3 data
    shift 3
    data="$(data_of "$n") $(data_of "$n" --eval)"
    [ -x "$tmp/$n.emu" ] && [ -x "$tmp/$n.c.out" ] || return
    # shellcheck disable=SC2086
    "$tmp/$n.c.out" $data --no-shuffle --steps "$steps" --log-every 1 --eval-every 3 \
        --log "$tmp/$n.c.jsonl" >/dev/null 2>"$tmp/$n.c.log" || { bad "$n: the C program failed"; cat "$tmp/$n.c.log"; return; }
    # shellcheck disable=SC2086
    env "$@" "$tmp/$n.emu" $data --no-shuffle --steps "$steps" --log-every 1 --eval-every 3 \
        --log "$tmp/$n.emu.jsonl" >/dev/null 2>"$tmp/$n.emu.log" || { bad "$n: the CUDA program failed"; cat "$tmp/$n.emu.log"; return; }
    # steps are captured after the eager warm-up step unless a fault is injected
    if [[ "$*" != *MP_EMU_FAIL* && "$*" != *MP_EMU_NO_GRAPH* ]] && grep -q "capture failed" "$tmp/$n.emu.log"; then
        bad "$n ($*): the step was not captured: $(grep "capture failed" "$tmp/$n.emu.log")"
    elif msg=$(compare "$tmp/$n.c.jsonl" "$tmp/$n.emu.jsonl" "$tol" 2>&1); then
        echo "ok   $n: $steps steps and evaluations as the C program's ($*)"
    else
        bad "$n ($*): the CUDA program's log differs from the C program's: $msg"
    fi
}
for n in mnist_mlp mnist_cnn char_transformer emu_options emu_buffers; do curve "$n" 6 2e-3 MP_EMU=graph; done
curve digits_mlp 6 1e-4 MP_EMU=graph
curve emu_wide 4 2e-3 MP_EMU=graph
curve emu_columns 4 2e-3 MP_EMU=graph
curve emu_additions 6 2e-3 MP_EMU=graph
curve emu_rnn 6 2e-3 MP_EMU=graph
curve emu_rnn_f32 6 1e-4 MP_EMU=graph
curve emu_select 6 2e-3 MP_EMU=graph
curve emu_route 6 2e-3 MP_EMU=graph
curve emu_route_f32 6 1e-4 MP_EMU=graph
curve emu_split 6 2e-3 MP_EMU=graph
curve emu_flash 6 2e-3 MP_EMU=graph
curve emu_flash_f32 6 1e-4 MP_EMU=graph
curve emu_mask 6 2e-3 MP_EMU=graph
curve emu_mask_f32 6 1e-4 MP_EMU=graph
curve emu_image 6 2e-3 MP_EMU=graph
curve emu_image_f32 6 1e-4 MP_EMU=graph
curve emu_rmsprop 8 1e-4 MP_EMU=graph
for n in mnist_cnn_f32 char_transformer_f32; do curve "$n" 6 1e-4 MP_EMU=graph; done
curve emu_columns_f32 4 1e-4 MP_EMU=graph
curve emu_mid 4 2e-3 MP_EMU=graph
curve emu_mid_f32 4 1e-4 MP_EMU=graph
curve mbconv 4 2e-3 MP_EMU=graph
curve mbconv_f32 4 1e-4 MP_EMU=graph

# The trained parameters of emu_columns under float32 (SGD: a gradient off
# by a factor moves them, where Adam's steps would not see it) equal the C
# program's within 1e-5 relative (of the larger magnitude, at least 1e-2;
# they come out within 8e-7); exit 1 with the worst tensor otherwise.
params() {   # params NAME: 0 when the two programs' parameters agree
    local n=$1 data
    data="$(data_of "$n") $(data_of "$n" --eval)"
    # shellcheck disable=SC2086
    "$tmp/$n.c.out" $data --no-shuffle --steps 4 --save "$tmp/$n.c.st" >/dev/null 2>&1 &&
    MP_EMU=graph "$tmp/$n.emu" $data --no-shuffle --steps 4 --save "$tmp/$n.emu.st" >/dev/null 2>&1 &&
    "$PY" tests/py/st.py close "$tmp/$n.c.st" "$tmp/$n.emu.st" 1e-5
}
for n in emu_columns_f32 emu_mid_f32 mbconv_f32 emu_route_f32 emu_rnn_f32 emu_rmsprop; do
    [ -x "$tmp/$n.emu" ] && [ -x "$tmp/$n.c.out" ] || continue
    if msg=$(params $n 2>&1); then
        echo "ok   $n: $msg"
    else
        bad "$n: the CUDA program's parameters differ from the C program's: $msg"
    fi
done
curve mnist_cnn 4 2e-3 MP_EMU_NO_GRAPH=1
curve emu_options 8 2e-3 MP_EMU_NO_GRAPH=1
curve mnist_mlp 6 2e-3 MP_CUDA_DATA=0
curve emu_options 8 2e-3 MP_CUDA_DATA=0

# ---- 3. checkpoints across the two programs ------------------------------------
ckpt() {
    local n=$1 data
    data=$(data_of "$n")
    [ -x "$tmp/$n.emu" ] && [ -x "$tmp/$n.c.out" ] || return
    # shellcheck disable=SC2086
    "$tmp/$n.c.out" $data --steps 8 --log-every 1 --log "$tmp/$n.straight.jsonl" >/dev/null 2>&1 &&
    "$tmp/$n.c.out" $data --steps 3 --save "$tmp/$n.3.safetensors" >/dev/null 2>&1 &&
    "$tmp/$n.emu" $data --steps 6 --resume "$tmp/$n.3.safetensors" --save "$tmp/$n.6.safetensors" \
        --log-every 1 --log "$tmp/$n.mixed.jsonl" >/dev/null 2>"$tmp/$n.r1" &&
    "$tmp/$n.c.out" $data --steps 8 --resume "$tmp/$n.6.safetensors" --log-every 1 \
        --log "$tmp/$n.mixed.jsonl" >/dev/null 2>"$tmp/$n.r2" ||
        { bad "$n: a checkpoint did not pass between the programs:"; cat "$tmp/$n.r1" "$tmp/$n.r2" 2>/dev/null; return; }
    tail -n 5 "$tmp/$n.straight.jsonl" >"$tmp/$n.a"
    cp "$tmp/$n.mixed.jsonl" "$tmp/$n.b"
    if msg=$(compare "$tmp/$n.a" "$tmp/$n.b" 2e-3 2>&1); then
        echo "ok   $n: C -> CUDA -> C checkpoints continue as one C run"
    else
        bad "$n: resumed across the programs, the run differs: $msg"
    fi
}
ckpt mnist_mlp
ckpt emu_options
ckpt emu_buffers
ckpt emu_rmsprop

# ---- 3b. buffers: loaded by --init, never changed by training -------------------
buffers_init() {
    local n=emu_buffers data
    data=$(data_of $n)
    [ -x "$tmp/$n.emu" ] && [ -x "$tmp/$n.c.out" ] || return
    # --init files: the model's tensors after a first run (plain), and the
    # same with the buffers redrawn (init)
    # shellcheck disable=SC2086
    "$tmp/$n.c.out" $data --steps 1 --save "$tmp/$n.first.safetensors" >/dev/null 2>&1 &&
    "$PY" - "$tmp/$n.first.safetensors" "$tmp/$n.plain.safetensors" "$tmp/$n.init.safetensors" <<'EOF2' || { bad "$n: no --init file"; return; }
import sys, numpy as np
sys.path.insert(0, "tests/py")
import st
t = {k: v for k, v in st.read(sys.argv[1]).items() if not k.startswith("optimizer.")}
st.write(sys.argv[2], t)
r = np.random.RandomState(3)
t["shift"] = r.randn(12).astype(np.float32)
t["mix"] = (r.randn(12, 12) * 0.4).astype(np.float32)
st.write(sys.argv[3], t)
EOF2
    # shellcheck disable=SC2086
    "$tmp/$n.c.out" $data --no-shuffle --steps 5 --init "$tmp/$n.plain.safetensors" --log-every 1 \
        --log "$tmp/$n.plain.jsonl" >/dev/null 2>&1 || { bad "$n: the C program failed from --init"; return; }
    local prog
    for prog in c.out emu; do
        # shellcheck disable=SC2086
        "$tmp/$n.$prog" $data --no-shuffle --steps 5 --init "$tmp/$n.init.safetensors" --log-every 1 \
            --log "$tmp/$n.init.$prog.jsonl" --save "$tmp/$n.after.$prog.safetensors" >/dev/null 2>"$tmp/$n.init.err" ||
            { bad "$n ($prog) --init:"; cat "$tmp/$n.init.err"; return; }
    done
    if msg=$("$PY" - "$tmp/$n.init.safetensors" "$tmp/$n.after.c.out.safetensors" "$tmp/$n.after.emu.safetensors" 2>&1 <<'EOF2'
import sys, numpy as np
sys.path.insert(0, "tests/py")
import st
init, c, cu = (st.read(p) for p in sys.argv[1:4])
for b in ("shift", "mix"):
    for name, t in (("C", c), ("CUDA", cu)):
        if not np.array_equal(t[b], init[b]):
            sys.exit(f"{name}: buffer {b} changed (max diff {np.abs(t[b] - init[b]).max()})")
for p in ("fc.weight", "head.bias"):
    if np.array_equal(cu[p], init[p]):
        sys.exit(f"CUDA: parameter {p} was not trained")
EOF2
    ) && msg=$(compare "$tmp/$n.init.c.out.jsonl" "$tmp/$n.init.emu.jsonl" 2e-3 2>&1) &&
       ! compare "$tmp/$n.init.c.out.jsonl" "$tmp/$n.plain.jsonl" 2e-3 >/dev/null 2>&1; then
        echo "ok   $n: buffers from --init reach both programs, come back unchanged, change the losses"
    else
        bad "$n --init: $msg"
    fi
}
buffers_init

# ---- 4. the loss-scale collapse and --check-numerics ---------------------------
same_error() {   # same_error NAME [args]: both programs exit 1 with one same line
    local n=$1
    shift
    "$tmp/$n.c.out" "$@" >/dev/null 2>"$tmp/c.err"
    local rc1=$?
    "$tmp/$n.emu" "$@" >/dev/null 2>"$tmp/e.err"
    local rc2=$?
    local m1 m2
    m1=$(tail -n 1 "$tmp/c.err" | sed 's/^[^:]*: //')
    m2=$(tail -n 1 "$tmp/e.err" | sed 's/^[^:]*: //')
    if [ $rc1 -eq 1 ] && [ $rc2 -eq 1 ] && [ "$m1" = "$m2" ] && [ -n "$m1" ]; then
        echo "ok   $n $*: $m2"
    else
        bad "$n $*: C exits $rc1 ($m1), CUDA exits $rc2 ($m2)"
    fi
}
if [ -x "$tmp/emu_nan.emu" ] && [ -x "$tmp/emu_nan.c.out" ]; then
    same_error emu_nan --data "x=$tmp/x4.npy" --log-every 50
    same_error emu_nan --data "x=$tmp/x4.npy" --check-numerics
fi

# ---- 5. errors of the device itself ----------------------------------------------
if [ -x "$tmp/mnist_mlp.emu" ]; then
    d=$(data_of mnist_mlp)
    # shellcheck disable=SC2086
    MP_EMU_NO_DEVICE=1 "$tmp/mnist_mlp.emu" $d --steps 2 >/dev/null 2>"$tmp/nodev"
    rc=$?
    [ $rc -eq 1 ] && grep -q "^mnist_mlp.emu: error: no CUDA device: " "$tmp/nodev" \
        && echo "ok   no device: $(cat "$tmp/nodev")" || bad "no device: exit $rc, $(cat "$tmp/nodev")"
    # shellcheck disable=SC2086
    MP_EMU_MEM_LIMIT=100000 "$tmp/mnist_mlp.emu" $d --steps 2 >/dev/null 2>"$tmp/oom"
    rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/oom")" -eq 1 ] && grep -q "cannot allocate .* MiB of device memory" "$tmp/oom" \
        && echo "ok   out of device memory: $(cat "$tmp/oom")" || bad "out of device memory: exit $rc, $(cat "$tmp/oom")"
    # MpDevice.bytes (--dry-run's figure) is the allocation a run makes
    for env in MP_CUDA_DATA=1 MP_CUDA_DATA=0; do
        # shellcheck disable=SC2086
        env MP_CUDA_VERBOSE=1 $env "$tmp/mnist_mlp.emu" $d --steps 1 >/dev/null 2>"$tmp/verbose"
        got=$(sed -n 's/.* \([0-9.]*\) MiB of device memory in one allocation (--dry-run.s figure \([0-9.]*\);.*/\1 \2/p' "$tmp/verbose")
        set -- $got
        [ -n "$got" ] && [ "$1" = "$2" ] && echo "ok   $env: --dry-run's device memory is the run's: $1 MiB" \
            || bad "$env: --dry-run's device memory differs from the run's: $(cat "$tmp/verbose")"
    done
fi
# ---- 6. a graceful first run: each fallback, injected into the stand-in ---------
fallback() {   # fallback NAME NOTE ENV...: the note once, then the C program's curve
    local n=$1 note=$2
    shift 2
    curve "$n" 4 2e-3 "$@"
    local k
    k=$(grep -c "^note: $note" "$tmp/$n.emu.log")
    [ "$k" = 1 ] && echo "ok   $n ($*): one note: $(grep "^note: " "$tmp/$n.emu.log")" \
        || bad "$n ($*): expected one note '$note', got $k: $(head -c 300 "$tmp/$n.emu.log")"
}
if [ -x "$tmp/mnist_mlp.emu" ]; then
    fallback mnist_mlp "CUDA graph capture failed" MP_EMU_FAIL=capture
    fallback mnist_mlp "cuBLAS cannot run" MP_EMU_FAIL=blas
    # MP_CUBLAS=off (docs/TRAINER.md): every product on the built-in kernel
    # from the start, none through cuBLAS (a fault injected into cuBLAS's
    # products would end the run), and the C program's curve
    curve mnist_mlp 4 2e-3 MP_CUBLAS=off MP_EMU_FAIL=kernel:cublasGemmEx
    fails_with() {   # fails_with REGEX ENV...: exit 1 with that one line
        local re=$1
        shift
        # shellcheck disable=SC2046
        env "$@" "$tmp/${prog:-mnist_mlp}.emu" $(data_of mnist_mlp) --steps 3 >/dev/null 2>"$tmp/f.err"
        local rc=$?
        [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/f.err")" -eq 1 ] && grep -Eq "$re" "$tmp/f.err" \
            && echo "ok   $*: $(cat "$tmp/f.err")" || bad "$*: exit $rc, $(head -c 300 "$tmp/f.err")"
    }
    fails_with "error: the NVIDIA driver is too old for this program: it runs CUDA 12.2, the program was built with CUDA 13.0" MP_EMU_FAIL=driver
    fails_with "error: no CUDA device: no NVIDIA driver is loaded" MP_EMU_FAIL=nodriver
    # a kernel's fault shows at a later call (the stand-in: the next one that
    # queues work): blamed on no kernel, the hint instead; MP_CUDA_SYNC=1
    # names the kernel or product that failed, its op and line
    hint="\\(rerun with MP_CUDA_SYNC=1 to name the kernel, the op and its source line\\)$"
    fails_with "^error: CUDA: an earlier kernel failed: an illegal memory access was encountered $hint" \
        MP_EMU_FAIL=kernel:cross_entropy
    fails_with "^error: CUDA: kernel 'cross_entropy' of op cross_entropy at mnist_mlp.mp:12 .*: an illegal memory access" \
        MP_EMU_FAIL=kernel:cross_entropy MP_CUDA_SYNC=1
    fails_with "^error: CUDA: an earlier kernel failed: an illegal memory access was encountered $hint" \
        MP_EMU_FAIL=kernel:cublasGemmEx
    fails_with "^error: CUDA: product 'cublasGemmEx' of op linear at mnist_mlp.mp:10: an illegal memory access" \
        MP_EMU_FAIL=kernel:cublasGemmEx MP_CUDA_SYNC=1
    # in a step replayed from its graph (the second run), a launch failure
    fails_with "^error: CUDA: an earlier kernel failed: unspecified launch failure $hint" \
        MP_EMU_FAIL=kernel:cross_entropy:launch MP_EMU_FAIL_AT=2
    fails_with "^error: CUDA: kernel 'cross_entropy' of op cross_entropy at mnist_mlp.mp:12 .*: unspecified launch failure" \
        MP_EMU_FAIL=kernel:cross_entropy:launch MP_EMU_FAIL_AT=2 MP_CUDA_SYNC=1
fi
# the program's header builds for the GPU at hand (-arch=native; a fixed
# -arch=sm_90 gives "no kernel image" on A100 and RTX cards) and says that
# plain nvcc works everywhere; the README's troubleshooting runs a failing
# kernel again under MP_CUDA_SYNC=1 and compute-sanitizer
if [ -f "$tmp/mnist_mlp.cu" ]; then
    if grep -q "^ \* Build: *nvcc -O3 -arch=native mnist_mlp.cu" "$tmp/mnist_mlp.cu" &&
        grep -q "plain .nvcc mnist_mlp.cu. works too, on every supported GPU" "$tmp/mnist_mlp.cu" &&
        ! grep -q -- "-arch=sm_" "$tmp/mnist_mlp.cu"; then
        echo "ok   the header builds with -arch=native, plain nvcc on every GPU"
    else
        bad "the generated header does not recommend -arch=native (or names a fixed -arch=sm_XX)"
    fi
fi
if grep -q "MP_CUDA_SYNC=1 compute-sanitizer" README.md; then
    echo "ok   README: troubleshooting with MP_CUDA_SYNC=1 and compute-sanitizer"
else
    bad "README.md's troubleshooting does not say to run MP_CUDA_SYNC=1 compute-sanitizer"
fi

# one exp: the CUDA kernels' sums of exp (softmax, cross-entropy, attention)
# take the C program's mp_expf_p, as the values they normalise do, never
# CUDA's expf (a row whose exps and their sum differ in the last bits)
if grep -nE '(^|[^_a-z])(__)?expf *\(' runtime/mp_cuda*.h >"$tmp/expf"; then
    bad "CUDA's expf in the CUDA runtime (use mp_expf_p, the C program's):"; cat "$tmp/expf"
else
    echo "ok   one exp: the CUDA kernels use mp_expf_p, as the C program"
fi

# ---- 7. the stand-in's checking modes catch their bug classes ---------------------
# tests/cuda/emu_mutants.cu: a mutant per mode, passing the old way, caught now
if "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h -Iruntime \
        tests/cuda/emu_mutants.cu -o "$tmp/mutants" -lm -ldl >"$tmp/mutants.log" 2>&1; then
    "$tmp/mutants" >"$tmp/mutants.out" 2>&1 || bad "the stand-in misses a mutant:"
    cat "$tmp/mutants.out"
else
    bad "tests/cuda/emu_mutants.cu does not build:"; head -n 20 "$tmp/mutants.log"
fi
# and in a whole program: cross_entropy's row sum taken from one thread's share
# (passes with one thread per row), the compute stream not waiting for the
# step's input copy (passes when streams run at once)
mutant() {   # mutant NAME SED [BASE]: BASE's program (mnist_mlp) built with the mutation
    local base=${3:-mnist_mlp}
    sed "$2" "$tmp/$base.cu" >"$tmp/$1.cu"
    cmp -s "$tmp/$base.cu" "$tmp/$1.cu" && { bad "mutant $1: the mutation did not apply"; return 1; }
    rt_build "$tmp/$1.cu" "$tmp/$1.emu" rt-cu-O0 "-include tests/cuda/mp_cuda_emu.h" \
        "$CXX0" -std=c++17 -O0 -x c++ -DMP_CU_EMU 2>"$tmp/$1.err" || { bad "mutant $1 does not build"; return 1; }
    cp "$tmp/$base.c.out" "$tmp/$1.c.out"
}
caught() {   # caught NAME WHAT: the mutant's curve must differ from the C program's
    local was=$fail
    fail=0
    curve "$1" 3 2e-3 >"$tmp/$1.caught"
    if [ $fail = 1 ]; then
        echo "ok   mutant $1 ($2) caught: $(sed 's/^FAIL: //' "$tmp/$1.caught" | cut -c 1-150)"
        fail=$was
    else
        bad "mutant $1 ($2) not caught"
    fi
}
if [ -x "$tmp/mnist_mlp.emu" ]; then
    m1='s/\*s = mp_acc_get(t\.sum(mp_cu_sumexp_part(/*s = mp_acc_get((mp_cu_sumexp_part(/'
    m2='/cudaStreamWaitEvent(mp_cu\.st, mp_cu\.copied\[s\]/d'
    if mutant mnist_mlp_m1 "$m1" && mutant mnist_mlp_m2 "$m2"; then
        curve mnist_mlp_m1 3 2e-3 MP_EMU_SERIAL=1     # the old way: not seen
        curve mnist_mlp_m2 3 2e-3 MP_EMU_SERIAL=1
        caught mnist_mlp_m1 "a thread's partial row sum"
        caught mnist_mlp_m2 "no wait for the input copy"
    fi
    # the first step captured, without the eager warm-up: cuBLAS's set-up
    # inside the capture fails it (the stand-in refuses it as CUDA does)
    m3='s/if (mp_cu\.graphs \&\& mp_cu\.warm \&\& !mp_cu\.exec\[s\]/if (mp_cu.graphs \&\& !mp_cu.exec[s]/'
    mutant mnist_mlp_m3 "$m3" && caught mnist_mlp_m3 "no eager warm-up before capture"
    # the update pass leaves the f16 working copies as the first cast made
    # them, while the step no longer casts (t_cuda_work.sh: bit for bit)
    m4='s/mp_cu_st(w, tl\.work_dt, i - tl\.start, p\[i\]);/(void)0;/'
    mutant mnist_mlp_m4 "$m4" && caught mnist_mlp_m4 "the update pass writes no working copy"
    # a kernel's fault blamed on the call that sees it (no sticky errors
    # told apart), a product not waited for under MP_CUDA_SYNC=1: the
    # fault checks of part 6 fail
    fault_caught() {   # fault_caught NAME WHAT REGEX ENV...: fails_with must fail
        local name=$1 what=$2 was=$fail
        shift 2
        fail=0
        prog=$name fails_with "$@" >"$tmp/$name.caught"
        if [ $fail = 1 ]; then
            echo "ok   mutant $name ($what) caught: $(sed 's/^FAIL: //' "$tmp/$name.caught" | cut -c 1-150)"
            fail=$was
        else
            bad "mutant $name ($what) not caught"
        fi
    }
    m5='s/^static inline int mp_cu_sticky(cudaError_t rc)$/static inline int mp_cu_sticky(cudaError_t rc) { return rc < 0; }\nstatic inline int mp_cu_sticky_was(cudaError_t rc)/'
    mutant mnist_mlp_m5 "$m5" && fault_caught mnist_mlp_m5 "a fault blamed on the next kernel" \
        "^error: CUDA: an earlier kernel failed: an illegal memory access was encountered $hint" \
        MP_EMU_FAIL=kernel:cross_entropy
    m6='s/^            if (mp_cu\.sync)        \/\* its kernels.*$/            if (0)/'
    mutant mnist_mlp_m6 "$m6" && fault_caught mnist_mlp_m6 "no wait after a product" \
        "^error: CUDA: product 'cublasGemmEx' of op linear at mnist_mlp.mp:10: an illegal memory access" \
        MP_EMU_FAIL=kernel:cublasGemmEx MP_CUDA_SYNC=1
fi
# Mutants of the kernels that read down columns, caught by the trained
# parameters (params) where a loss curve may not tell: batch_norm's weight
# gradient 0.1% off (the curve moves by 5e-6 relative, the parameters by
# 4e-5 to 5e-5); a middle-axis softmax that takes a thread's partial column
# sum for the column's (passes with one thread per block), a lane reading
# another column than its own, a tile's sum that drops every other row.
param_mutant() {   # param_mutant BASE NAME SED WHAT
    mutant "$2" "$3" "$1" || return
    if msg=$(params "$2" 2>&1); then
        bad "mutant $2 ($4) not caught: $msg"
    else
        echo "ok   mutant $2 ($4) caught: ${msg:-the mutated program did not finish its run}"
    fi
}
if [ -x "$tmp/emu_columns_f32.emu" ]; then
    param_mutant emu_columns_f32 emu_columns_f32_m \
        's/MP_COL_GX, dy, x, mean, rstd, 1\.0f);/MP_COL_GX, dy, x, mean, rstd * 1.001f, 1.0f);/' \
        "batch_norm dw 0.1% off"
fi
if [ -x "$tmp/emu_mid_f32.emu" ]; then
    param_mutant emu_mid_f32 emu_mid_m1 's/float s = mp_acc_get(t\.sum_lanes(e, (int)h\.P));/float s = mp_acc_get(e);/' \
        "softmax over axis 1: a thread's partial column sum"
    [ -x "$tmp/emu_mid_m1.emu" ] && curve emu_mid_m1 4 1e-4 MP_EMU_SERIAL=1   # the old way: not seen
    param_mutant emu_mid_f32 emu_mid_m2 's/\*off = o \* h->len \* h->inner + \*col;/*off = o * h->len * h->inner + lane;/' \
        "softmax over axis 1: a lane reading another column"
    param_mutant emu_mid_f32 emu_mid_m3 's/o \* h\.inner + col, r0, s\.l1, step)/o * h.inner + col, r0, s.l1, 2 * step)/' \
        "sum over axis 1: every other row of a tile dropped"
fi
if [ -x "$tmp/emu_rnn_f32.emu" ]; then
    param_mutant emu_rnn_f32 emu_rnn_m1 \
        's/OT, T \* G, w, WT, H, 1\.0f, dhr, MP_F32, H);/OT, T * G, w, WT, H, 0.0f, dhr, MP_F32, H);/' \
        "gru's back-propagation through time: the product overwrites d h_{t-1}'s direct part"
fi

# ---- 8. attention's tiled kernels ------------------------------------------------
# attention's tiled kernels, kernel by kernel against the C program's
# (tests/cuda/emu_attention.cu: causal and not, cross, head sizes 16 to 128,
# f32 / f16 / bf16, dropout), and three bugs it catches, each in a copy of
# runtime/: the barrier after a key tile is staged in shared memory removed
# (threads read the tile before the others wrote it: passes with one thread
# per block), and the online softmax's running sum not rescaled when the
# running max grows, and dropout's mask missing from the backward's D_i
kernel_build() {   # kernel_build TEST.cu NAME [SED]: a kernel test on runtime/ and the stand-in (mutated by SED)
    mkdir -p "$tmp/rt_$2" && cp runtime/*.h tests/cuda/mp_cuda_emu.h "$tmp/rt_$2/"
    if [ -n "${3:-}" ]; then
        sed -i "$3" "$tmp/rt_$2/mp_cuda_ops.h" "$tmp/rt_$2/mp_cuda_items.h" "$tmp/rt_$2/mp_cuda_flash.h" \
            "$tmp/rt_$2/mp_cuda_emu.h"
        { diff -rq runtime "$tmp/rt_$2" | grep -q '^Files' ||
          ! cmp -s tests/cuda/mp_cuda_emu.h "$tmp/rt_$2/mp_cuda_emu.h"; } ||
            { bad "$1 mutant $2: the mutation did not apply"; return 1; }
    fi
    "$CXX0" -std=c++17 -O0 -x c++ -DMP_CU_EMU -include "$tmp/rt_$2/mp_cuda_emu.h" -I"$tmp/rt_$2" \
        "$1" -o "$tmp/$2" -lm >"$tmp/$2.log" 2>&1 ||
        { bad "$1 ($2) does not build:"; head -n 20 "$tmp/$2.log"; return 1; }
}
att_build() { kernel_build tests/cuda/emu_attention.cu "$@"; }   # att_build NAME [SED]
if att_build att; then
    "$tmp/att" >"$tmp/att.out" 2>&1 || bad "attention: the CUDA program's kernels differ from the C program's:"
    cat "$tmp/att.out"
fi
# (a mutant's run stops at its first failing case: --first-fail)
att_mutant() {   # att_mutant NAME WHAT SED SERIAL: caught; SERIAL 1: passes with one thread per block
    att_build "$1" "$3" || return
    if [ "$4" = 1 ] && ! MP_EMU_SERIAL=1 "$tmp/$1" >"$tmp/$1.out" 2>&1; then
        bad "attention mutant $1 ($2) fails with one thread per block too: it proves nothing of the threads"
    elif "$tmp/$1" --first-fail >"$tmp/$1.out" 2>&1; then
        bad "attention mutant $1 ($2) not caught"
    else
        echo "ok   attention mutant $1 ($2) caught: $(grep -m 1 '^FAIL' "$tmp/$1.out")"
    fi
}
att_mutant att_barrier "no barrier after staging a key tile" '/t\.sync();   \/\* the key tile staged/d' 1
att_mutant att_rescale "the running sum not rescaled" '/^        l->[sc] \*= f;$/d' 0
# dropout: the backward's D_i = rowsum(P dP') taken over dP without the mask
att_mutant att_drop_d "D_i without dropout's mask" \
    's/mp_acc_add(&d, mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, dp\[r \* a.t + j\]) \*/mp_acc_add(\&d, dp[r * a.t + j] */' 0
# the Tensor Core kernels (mp_cuda_flash.h) against the PTX ISA's fragments
# as the stand-in lays them out: a kernel that loads v's B fragment with
# row and column swapped (ldmatrix without .trans); k's ldmatrix with
# the row addresses of the wrong lanes; a stand-in whose ldmatrix.trans
# does not transpose (the low halves); one that builds P's A fragment from the wrong
# accumulators (a1 from the next n-tile); a stand-in whose A layout puts
# a2, a3 in rows g + 8 (as a1) instead of g; the running output not
# rescaled when a row's max grows; the backward's dv from dS instead of P,
# its D = rowsum(dy y) taken as rowsum(dy dy), and the forward's kept
# log-sum-exp without its log of the sum; the quad's max taken over a pair;
# dropout's mask missing from dq's dP, and the forward's bits drawn for
# the transposed tile (dk and dv's)
att_mutant att_tc_vfrag "v's fragment, row and column swapped (ldmatrix without .trans)" \
    's/(lane >> 4) \* 8, 1);/(lane >> 4) * 8, 0);/' 0
att_mutant att_tc_kfrag "k's ldmatrix rows from the wrong lanes" \
    's/(8 \* n + (lane \& 7) + (lane >> 4) \* 8)/(8 * n + (lane \& 7) + (lane >> 3 \& 1) * 8)/' 0
att_mutant att_tc_emu_ldsm "the stand-in's ldmatrix.trans not transposing" \
    's/uint32_t lo = b->width ? rows\[2 \* tg\]\[g\] : rows\[g\]\[2 \* tg\];/uint32_t lo = rows[g][2 * tg];/' 0
att_mutant att_tc_pfrag "P's fragment from the wrong accumulators" \
    's/mp_cu_fa_pack(s\[2 \* kc\]\[2\], s\[2 \* kc\]\[3\], a.bf),/mp_cu_fa_pack(s[2 * kc + 1][0], s[2 * kc + 1][1], a.bf),/' 0
att_mutant att_tc_emu_a "the stand-in's A fragment rows" 's/(i < 2 || (i >= 4 \&\& i < 6)) ? 0 : 8/i < 4 ? 0 : 8/' 0
att_mutant att_tc_rescale "the output not rescaled" '/^                    o\[d\]\[2 \* r + 1\] \*= f;$/d' 0
att_mutant att_tc_dv "dv from dS in place of P" 's/mp_cu_mma(t, dv\[d\], fp, fb, a.bf);/mp_cu_mma(t, dv[d], fs, fb, a.bf);/' 0
att_mutant att_tc_d "D = rowsum(dy dy) in place of rowsum(dy y)" \
    's/mp_cu_ld(ks, a.bf ? MP_BF16 : MP_F16, r \* ld + d);/mp_cu_ld(dys, a.bf ? MP_BF16 : MP_F16, r * ld + d);/' 0
att_mutant att_tc_lse "the forward's log-sum-exp kept without the log of the sum" \
    's/a.lse\[h \* a.T + i\] = l\[r\] > 0.0f ? m\[r\] + logf(l\[r\]) : -INFINITY;/a.lse[h * a.T + i] = l[r] > 0.0f ? m[r] : -INFINITY;/' 0
att_mutant att_tc_drop_dq "dq's dP without dropout's mask" \
    's/float dpv = DROP ? mp_cu_fa_dropped(keep, 8 \* kc + 4 \* nn + e, a.dscale, dp\[nn\]\[e\])/float dpv = DROP ? dp[nn][e]/' 0
att_mutant att_tc_drop_bits "the forward's dropout bits of the transposed tile" \
    's/kw\[t.tid\] = mp_cu_fa_keep(\&a, h, i0, j0, w, g, c, 0);/kw[t.tid] = mp_cu_fa_keep(\&a, h, i0, j0, w, g, c, 1);/' 0
att_mutant att_tc_quad "the quad's max over a pair" 's/for (int o = 1; o <= 2; o <<= 1) {/for (int o = 1; o <= 1; o <<= 1) {/; s/float p = b->width ? x + y : (y > x ? y : x), q = b->width ? z + u : (u > z ? u : z);/float p = b->width ? x + y : (y > x ? y : x), q = p;/' 0

# ---- 9. copies by words ------------------------------------------------------------
# transposes, chunks, slices, concat, slice_grad and linear's bias rows,
# through the launchers and through the word copy alone, byte for byte
# against the host (tests/cuda/emu_copies.cu), where words qualify and
# where they do not; and three mutants caught: a word gather whose strides
# stay in elements, slice_grad's window one word too wide, a slice run as
# a concat
cp_build() { kernel_build tests/cuda/emu_copies.cu "$@"; }   # cp_build NAME [SED]
if cp_build copies; then
    "$tmp/copies" >"$tmp/copies.out" 2>&1 || bad "copies by words differ from the host's:"
    grep -v '^ok' "$tmp/copies.out"
    echo "ok   copies by words: $(grep -c '^ok.*(words)' "$tmp/copies.out") cases by words, $(grep -c '^ok.*(elements)' "$tmp/copies.out") declined as they should"
fi
cp_mutant() {   # cp_mutant NAME WHAT SED: the run fails (a wrong byte, or the stand-in's bounds)
    cp_build "$1" "$3" || return
    if ("$tmp/$1" >"$tmp/$1.out" 2>&1; exit $?) 2>/dev/null; then   # (no "Bus error" line from the shell)
        bad "copies mutant $1 ($2) not caught"
    else
        echo "ok   copies mutant $1 ($2) caught"
    fi
}
cp_mutant cp_stride "a word gather's strides left in elements" 's/        v.s\[d\] \/= w;/        v.s[d] \/= 1;/'
cp_mutant cp_pad "slice_grad's window one word too wide" 's/< wlen) {   \/\* unsigned/<= wlen) {   \/* unsigned/'
cp_mutant cp_mode "a slice run as a concat" \
    's/                                       MP_CU_SLICE))/                                       MP_CU_PLACE))/'

# ---- 10. recomputation under a memory budget -----------------------------------------
# Every example (at t_memplan.sh's batch sizes: lib.sh's small_models) and
# tests/models model: its CUDA program in the stand-in at the smallest
# budget its plan names, fused and unfused (each at its own smallest: every
# value that frees memory recomputed), against the fused program without a
# budget: the same log lines (but samples_per_s) and byte-identical
# checkpoints after 2 steps on synthetic data (tests/py/synth_data.py);
# t_memplan.sh checks the C programs so.
t10=$(date +%s)
. tests/py/lib.sh     # small_models
budget_of() {   # budget_of MODEL.mp [mpcc options]: the smallest budget mpcc names
    "$MPCC" "$@" --memory-budget 1 --dump-plan 2>&1 >/dev/null |
        sed -n 's/.*the smallest budget this model can meet is \([0-9]*\) bytes.*/\1/p'
}
mkdir -p "$tmp/mb"
small_models examples/*.mp tests/models/*.mp >"$tmp/mb/models"
while read -r mp; do
    n=mb_$(basename "$mp" .mp)
    b=$(budget_of "$mp" --fuse) u=$(budget_of "$mp" --no-fuse)
    [ -n "$b" ] && [ -n "$u" ] || { echo "FAIL $n: no smallest budget named" >>"$tmp/mb/builds"; continue; }
    echo "$mp $b" >"$tmp/mb/$n.mp"
    echo "emu_build $mp $n --fuse"
    echo "emu_build $mp $n.fuse --fuse --memory-budget $b"
    echo "emu_build $mp $n.no-fuse --no-fuse --memory-budget $u"
done <"$tmp/mb/models" | xargs -P 2 -L 1 bash -c '"$@"' _ >>"$tmp/mb/builds" 2>&1
grep "^FAIL" "$tmp/mb/builds" && fail=1
mb_ok=0 mb_re=0
for f in "$tmp"/mb/mb_*.mp; do
    n=$(basename "$f" .mp)
    read -r mp b <"$f"
    [ -x "$tmp/$n.emu" ] && [ -x "$tmp/$n.fuse.emu" ] && [ -x "$tmp/$n.no-fuse.emu" ] || continue
    "$MPCC" "$mp" --dump-plan=json >"$tmp/mb/$n.json" 2>/dev/null &&
        mkdir -p "$tmp/mb/$n" && "$PY" tests/py/synth_data.py "$tmp/mb/$n.json" "$mp" "$tmp/mb/$n" 2 >"$tmp/mb/$n.args" ||
        { bad "$n: no synthetic data"; continue; }
    data=$(cat "$tmp/mb/$n.args")
    for v in "" .fuse .no-fuse; do
        # shellcheck disable=SC2086
        "$tmp/$n$v.emu" $data --no-shuffle --steps 2 --log-every 1 --log "$tmp/mb/$n$v.jsonl" \
            --save "$tmp/mb/$n$v.st" >"$tmp/mb/$n$v.out" 2>&1 ||
            { bad "$n$v (stand-in): exit $?: $(tail -n 1 "$tmp/mb/$n$v.out")"; continue 2; }
        sed -i 's/"samples_per_s":[0-9.e+-]*//' "$tmp/mb/$n$v.jsonl"
    done
    for v in .fuse .no-fuse; do
        cmp -s "$tmp/mb/$n.jsonl" "$tmp/mb/$n$v.jsonl" ||
            { bad "${n#mb_}: the CUDA program's log differs at its smallest budget ($v)"
              diff "$tmp/mb/$n.jsonl" "$tmp/mb/$n$v.jsonl" | head -n 4; continue 2; }
        cmp -s "$tmp/mb/$n.st" "$tmp/mb/$n$v.st" ||
            { bad "${n#mb_}: the CUDA program's checkpoint differs at its smallest budget ($v)"; continue 2; }
    done
    mb_ok=$((mb_ok + 1))
    "$MPCC" "$mp" --fuse --memory-budget "$b" --dump-plan=json 2>/dev/null | grep -q '"recomputes"' &&
        mb_re=$((mb_re + 1))
done
echo "ok   recomputation: $mb_ok models' CUDA programs in the stand-in ($mb_re of them recomputing at" \
    "their smallest budget) train to the same bits with and without it, fused and unfused ($(( $(date +%s) - t10 ))s)"
[ "$mb_ok" -ge 30 ] && [ "$mb_re" -ge 12 ] || bad "recomputation: too few models checked ($mb_ok, $mb_re recomputing)"

# ---- 11. mixed_float8: the quantised products on the device ----------------------
# tests/models/mlp_small.mp under delayed(amax_history = 4, margin = 1) and
# current(margin = 0) scaling (its hidden layer quantised: x and w e4m3,
# dy e5m2) computes what the C program computes: the log of 12 steps
# (losses and evaluations to 1e-6, the f32 output layer's sums in another
# order; the scales' exponents equal), as a graph,
# eagerly, and in host mode (--check-numerics: the host's trainer ends the
# steps, the device quantises), and the checkpoint's scales and quantised
# layer; 6 steps, a checkpoint and 6 more give the 12-step checkpoint's
# bytes; --gradcheck keeps products exact. The stand-in is an sm_90 GPU,
# so the products are cuBLASLt's FP8 ones (the stand-in's cublasLtMatmul:
# e4m3 / e5m2 bytes decoded, scales by pointer, its refusals); also with
# MP_CUDA_FP8=bf16 (bf16 products of the quantised values), on an sm_80
# stand-in (MP_EMU_CC=80: the same, said) and with cuBLASLt refusing (one
# note, then bf16 products); the text log's line equals the C program's
# (its scales' range); MP_CUDA_FP8=fp8 is refused (exit 2). Five mutants of the
# program are caught: operands not rounded to FP8 (bf16 products), an
# operand not transposed for cuBLASLt's "TN" rule, the scales 2^e in
# place of 2^-e, the step end not run (mp_fp8_step_taken: delayed scales
# never move), host mode not sending the host's scales; a negative control:
# the mixed_bfloat16 program differs;
# tests/plan/fp8.mp (a product by fp8_ops, a @ transpose(a)) too. Then
# char_transformer under mixed_float8 (attention, fused epilogues, the
# backward's dx products) follows its C program as the other mixed models.
t11=$(date +%s)
for v in "delayed|fp8 = delayed(amax_history = 4, margin = 1)" "current|fp8 = current(margin = 0)" \
    "bf16|precision = mixed_bfloat16"; do
    l=${v#*|}
    [ "${v%%|*}" = bf16 ] && p=$l || p="precision = mixed_float8\n  $l"
    sed "s/^  optimizer = .*/  optimizer = adam(lr = 1e-2)\n  $p/" tests/models/mlp_small.mp >"$tmp/f8_${v%%|*}.mp"
done
{
    for n in delayed current bf16; do
        echo "emu_build $tmp/f8_$n.mp f8_$n"
        echo "c_build $tmp/f8_$n.mp f8_$n"
    done
    echo "emu_build tests/plan/fp8.mp f8_plan"
    echo "c_build tests/plan/fp8.mp f8_plan"
    echo "emu_build examples/char_transformer.mp char_transformer_f8 --precision mixed_float8"
    echo "c_build examples/char_transformer.mp char_transformer_f8 --precision mixed_float8"
} | xargs -P 2 -L 1 bash -c '"$@"' _ >"$tmp/f8.builds" 2>&1
cat "$tmp/f8.builds"
grep -q "^FAIL" "$tmp/f8.builds" && fail=1
f8_run() {   # f8_run PROGRAM LOG STEPS [options...]: 12 steps of the synthetic MNIST (env: F8_ENV)
    local prog=$1 log=$2 steps=$3
    shift 3
    # shellcheck disable=SC2046,SC2086
    env ${F8_ENV:-} "$prog" $(data_of mnist_mlp) $(data_of mnist_mlp --eval) --no-shuffle --steps "$steps" \
        --log-every 1 --eval-every 4 --log "$log" "$@" >/dev/null 2>"$log.err"
}
f8_same() {   # f8_same A.jsonl B.jsonl WHAT: the two logs agree
    if msg=$(compare "$1" "$2" 1e-6 2>&1); then
        echo "ok   mixed_float8 $3: the C program's log ($msg)"
    else
        bad "mixed_float8 $3: the CUDA program's log differs from the C program's: $msg"
    fi
}
for n in delayed current; do
    e=$tmp/f8_$n.emu
    [ -x "$e" ] && [ -x "$tmp/f8_$n.c.out" ] || continue
    f8_run "$tmp/f8_$n.c.out" "$tmp/f8_$n.c.jsonl" 12 --save "$tmp/f8_$n.c.st" ||
        { bad "f8_$n: the C program failed"; cat "$tmp/f8_$n.c.jsonl.err"; continue; }
    f8_run "$e" "$tmp/f8_$n.g.jsonl" 12 --save "$tmp/f8_$n.g.st" ||
        { bad "f8_$n: the CUDA program failed"; cat "$tmp/f8_$n.g.jsonl.err"; continue; }
    grep -q "note: mixed_float8: the products run on FP8 Tensor Cores (cuBLASLt" "$tmp/f8_$n.g.jsonl.err" ||
        bad "f8_$n: no start-up note on how the FP8 products run"
    f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.g.jsonl" "$n, as a graph"
    F8_ENV=MP_CUDA_FP8=bf16 f8_run "$e" "$tmp/f8_$n.b.jsonl" 12 &&
        grep -q "note: mixed_float8: the products run on Tensor Cores as bf16 products .*: MP_CUDA_FP8=bf16" \
            "$tmp/f8_$n.b.jsonl.err" && f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.b.jsonl" "$n, bf16 products"
    F8_ENV=MP_EMU_FAIL=lt f8_run "$e" "$tmp/f8_$n.l.jsonl" 12 &&
        [ "$(grep -c "note: mixed_float8: cuBLASLt refused an FP8 product" "$tmp/f8_$n.l.jsonl.err")" = 1 ] &&
        f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.l.jsonl" "$n, cuBLASLt refusing (one note)"
    F8_ENV=MP_EMU_CC=80 f8_run "$e" "$tmp/f8_$n.a.jsonl" 12 &&
        grep -q "note: mixed_float8: the products run on Tensor Cores as bf16 products .*: a GPU before sm_89" \
            "$tmp/f8_$n.a.jsonl.err" && f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.a.jsonl" "$n, an sm_80 GPU (bf16 products, said)"
    MP_CUDA_GRAPH=0 f8_run "$e" "$tmp/f8_$n.e.jsonl" 12 && f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.e.jsonl" "$n, eagerly"
    f8_run "$e" "$tmp/f8_$n.h.jsonl" 12 --check-numerics &&
        f8_same "$tmp/f8_$n.c.jsonl" "$tmp/f8_$n.h.jsonl" "$n, host mode (--check-numerics)"
    if msg=$("$PY" - "$tmp/f8_$n.c.st" "$tmp/f8_$n.g.st" 2>&1 <<'EOF2'
import sys, numpy as np
sys.path.insert(0, "tests/py")
import st
c, g = st.read(sys.argv[1]), st.read(sys.argv[2])
for k in ("fp8.amax_history", "fp8.scale_exp", "h.weight", "h.bias"):
    if not np.array_equal(c[k], g[k]):
        sys.exit(f"{k} differs")
bad = [k for k in c if not np.allclose(c[k], g[k], rtol=1e-5, atol=1e-7)]
sys.exit(f"{bad} differ" if bad else 0)
EOF2
    ); then
        echo "ok   mixed_float8 $n: the checkpoint's scales and quantised layer equal the C program's"
    else
        bad "mixed_float8 $n: the checkpoint differs from the C program's: $msg"
    fi
    f8_run "$e" "$tmp/f8_$n.6.jsonl" 6 --save "$tmp/f8_$n.6.st" &&
        f8_run "$e" "$tmp/f8_$n.r.jsonl" 12 --resume "$tmp/f8_$n.6.st" --save "$tmp/f8_$n.r.st" &&
        cmp -s "$tmp/f8_$n.g.st" "$tmp/f8_$n.r.st" &&
        echo "ok   mixed_float8 $n: 6 steps, a checkpoint and 6 more give the 12-step checkpoint's bytes" ||
        bad "mixed_float8 $n: resuming is not exact"
    "$e" --gradcheck >"$tmp/f8_$n.gc" 2>&1 && echo "ok   mixed_float8 $n: --gradcheck (products exact)" ||
        { bad "mixed_float8 $n: --gradcheck"; tail -n 5 "$tmp/f8_$n.gc"; }
done
# the text log carries the scales' range as the C program's; MP_CUDA_FP8
# takes auto or bf16, and says so of anything else (exit 2, a usage error)
if [ -s "$tmp/f8_delayed.g.jsonl.err" ]; then
    f8_run "$tmp/f8_delayed.emu" "$tmp/f8_text.jsonl" 3 && f8_run "$tmp/f8_delayed.c.out" "$tmp/f8_ctext.jsonl" 3 &&
        grep -oE "^step 3/3 .* fp8_scale 2\^-?[0-9]+\.\.2\^-?[0-9]+$" "$tmp/f8_text.jsonl.err" | grep -o "fp8_scale.*" \
            >"$tmp/f8_text.line" && [ -s "$tmp/f8_text.line" ] &&
        grep "^step 3/3 " "$tmp/f8_ctext.jsonl.err" | grep -o "fp8_scale.*" | cmp -s - "$tmp/f8_text.line" &&
        echo "ok   mixed_float8: the text log's scales' range, as the C program's: $(cat "$tmp/f8_text.line")" ||
        bad "mixed_float8: the CUDA program's text log line differs from the C program's"
    F8_ENV=MP_CUDA_FP8=fp8 f8_run "$tmp/f8_delayed.emu" "$tmp/f8_env.jsonl" 3; rc=$?
    [ $rc = 2 ] && grep -q "error: MP_CUDA_FP8=fp8: expected auto .* or bf16" "$tmp/f8_env.jsonl.err" &&
        echo "ok   MP_CUDA_FP8=fp8: $(head -n 1 "$tmp/f8_env.jsonl.err") (exit 2)" ||
        { bad "MP_CUDA_FP8=fp8 (exit $rc)"; cat "$tmp/f8_env.jsonl.err"; }
fi
if [ -x "$tmp/f8_bf16.emu" ] && [ -s "$tmp/f8_delayed.c.jsonl" ]; then
    f8_run "$tmp/f8_bf16.emu" "$tmp/f8_bf16.g.jsonl" 12
    compare "$tmp/f8_delayed.c.jsonl" "$tmp/f8_bf16.g.jsonl" 1e-6 >/dev/null 2>&1 &&
        bad "negative control: the mixed_bfloat16 program's log equals the mixed_float8 C program's" ||
        echo "ok   negative control: the mixed_bfloat16 program's log differs"
fi
f8_mutant() {   # f8_mutant NAME RECIPE WHAT SED [run options]: a program so changed must differ
    local name=$1 n=$2 what=$3 expr=$4
    shift 4
    sed "$expr" "$tmp/f8_$n.cu" >"$tmp/f8_$name.cu"
    cmp -s "$tmp/f8_$n.cu" "$tmp/f8_$name.cu" && { bad "mutant $name: the sed changed nothing"; return; }
    "$CXX0" -std=c++17 -O0 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$tmp/f8_$name.cu" \
        -o "$tmp/f8_$name.emu" -lm 2>"$tmp/f8_$name.err" || { bad "mutant $name does not build"; return; }
    f8_run "$tmp/f8_$name.emu" "$tmp/f8_$name.jsonl" 12 "$@"
    compare "$tmp/f8_$n.c.jsonl" "$tmp/f8_$name.jsonl" 1e-6 >/dev/null 2>&1 &&
        bad "mixed_float8: a mutant passes ($what)" || echo "ok   mixed_float8: a mutant is caught ($what)"
}
if [ -s "$tmp/f8_delayed.c.jsonl" ]; then
    F8_ENV=MP_CUDA_FP8=bf16 f8_mutant unrounded delayed "operands not rounded to FP8" \
        's/mp_fp8_round(mp_cu_ld(x, XT, i) \* mp_pow2f(e), fmt) \* mp_pow2f(-e)/mp_cu_ld(x, XT, i)/'
    f8_mutant untransposed delayed "an operand not transposed for cuBLASLt" \
        's/mp_cu_fp8_bytes(0, &sa, g->M, g->K, g->ta);/mp_cu_fp8_bytes(0, \&sa, g->M, g->K, 0);/'
    f8_mutant scale_up delayed "the scales 2^e for 2^-e" 's/\*scale = mp_pow2f(-e);/*scale = mp_pow2f(e);/'
    f8_mutant no_step_end delayed "the step end not run" 's/^    mp_fp8_step_end(f);$//'
    f8_mutant no_push delayed "host mode not sending the host's scales" \
        '/the host.s trainer ends the steps: its scales/{n;s/mp_cu_fp8_push(m->fp8);/(void)0;/}' --check-numerics
fi
# tests/plan/fp8.mp: x @ w with a parameter w, a @ transpose(a) (one
# value, one scale, one quantised copy) and p @ a through fp8_ops
"$PY" -c "import numpy as np, sys; r = np.random.RandomState(5)
np.save(sys.argv[1] + '/x816.npy', r.randn(64, 16).astype(np.float32))
np.save(sys.argv[1] + '/t84.npy', r.randn(64, 4).astype(np.float32))" "$tmp"
if [ -x "$tmp/f8_plan.emu" ] && [ -x "$tmp/f8_plan.c.out" ]; then
    for prog in c.out emu; do
        MP_EMU=graph "$tmp/f8_plan.$prog" --data "x=$tmp/x816.npy" --data "t=$tmp/t84.npy" --no-shuffle --steps 12 \
            --log-every 1 --log "$tmp/f8_plan.$prog.jsonl" >/dev/null 2>&1 || bad "tests/plan/fp8.mp ($prog) failed"
    done
    f8_same "$tmp/f8_plan.c.out.jsonl" "$tmp/f8_plan.emu.jsonl" "tests/plan/fp8.mp (x @ w, a @ transpose(a), fp8_ops)"
fi
curve char_transformer_f8 6 2e-3 MP_EMU=graph
echo "ok   mixed_float8 section: $(( $(date +%s) - t11 ))s"

# ---- 12. bench/gpu_check.sh's rule for trainings that part from themselves ----------
# bench/nudge.py moves one element of each tensor by an ulp of f16 (whose
# working copies would round an f32 ulp away): mnist_mlp's C program from
# those parameters starts within 1e-5 of its own run, not on it;
# compare_logs.py's envelope (A B TOL STRICT DRIFT A2 FACTOR) lets a
# log part from A by FACTOR times what A2 parted by up to that line, and no
# more: a log 1.5 times as far as a chaotic A2 passes (and fails without
# the envelope), a jump of 30% where A2 parted by 0.1% fails.
nudge_check() {   # the mnist_mlp C program from nudged parameters: step 1 just apart
    local n=mnist_mlp i
    [ -x "$tmp/$n.c.out" ] || return 0
    # shellcheck disable=SC2046
    "$tmp/$n.c.out" $(data_of $n) --steps 0 --save "$tmp/nudge.init.st" >/dev/null 2>&1 &&
        "$PY" bench/nudge.py --bits 10 "$tmp/nudge.init.st" "$tmp/nudge.st" >/dev/null || return 1
    for i in init.st st; do
        # shellcheck disable=SC2046
        "$tmp/$n.c.out" $(data_of $n) --init "$tmp/nudge.$i" --no-shuffle --steps 3 --log-every 1 \
            --log "$tmp/nudge.$i.jsonl" >/dev/null 2>&1 || return 1
    done
    "$PY" - "$tmp/nudge.init.st.jsonl" "$tmp/nudge.st.jsonl" <<'EOF2'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
r = abs(a[0] - b[0]) / a[0]
sys.exit(0 if 0 < r < 1e-5 else f"step 1 apart by {r}")
EOF2
}
nudge_check && echo "ok   bench/nudge.py: the run from nudged parameters starts apart, within 1e-5" ||
    bad "bench/nudge.py: the nudged run does not start just apart"
"$PY" - "$tmp" <<'EOF2'
import json, sys
d = sys.argv[1]
a = [2.3562248, 2.3727798, 2.5407383, 2.7170305, 2.7515514, 2.4622612, 3.180519, 2.9166076]
a2 = [2.3562243, 2.372838, 2.5435772, 2.717949, 2.8066087, 2.4517212, 3.0602994, 3.0960376]
for name, vals in (("a", a), ("a2", a2), ("b", [x + 1.5 * (y - x) for x, y in zip(a, a2)]),
                   ("jump", [x * (1.3 if i == 3 else 1.0) for i, x in enumerate(a)])):
    with open(f"{d}/env_{name}.jsonl", "w") as f:
        for i, v in enumerate(vals):
            f.write(json.dumps({"step": i + 1, "loss": v, "loss_scale": 1, "skipped": 0}) + "\n")
EOF2
env_cmp() { compare "$tmp/env_a.jsonl" "$tmp/env_$1.jsonl" 1e-4 1 5e-2 "${@:2}" >/dev/null 2>&1; }
env_cmp b "$tmp/env_a2.jsonl" 4 && ! env_cmp b && ! env_cmp jump "$tmp/env_a2.jsonl" 4 &&
    echo "ok   compare_logs.py's envelope: 1.5x a chaotic run's parting passes (not without it), a 30% jump fails" ||
    bad "compare_logs.py's envelope of a nudged run"

echo "t_cuda_emu: $(( $(date +%s) - start ))s"
exit $fail
