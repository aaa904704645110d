#!/usr/bin/env bash
# run_all: once (CI's time allows the CUDA builds and the stand-in for the default, fused program only: make test-nofuse skips it; MPCC_NO_FUSE=1 ONLY=t_cuda make test runs them unfused)
# t_cuda_build.sh - the CUDA target builds with nvcc exactly as a user
# builds it, and fails cleanly where there is no GPU (CI has none):
#   1. every example, every tests/gradcheck model and tests/cuda/emu_mid.mp
#      (the middle-axis kernels no example uses): `mpcc M.mp -o M.cu`,
#      then plain `nvcc M.cu` (only -Xptxas -v added) with no warning at
#      all, and ptxas's report: no kernel with a stack frame, a spill or
#      more than 128 registers, and every kernel's registers (in the SM's
#      allocation unit of 8) times its launch bound (the NT of
#      mp_cu_k_each / rows / one<NT, F>: __launch_bounds__(NT), the most
#      threads it is launched with) within an SM's 64K registers, or the
#      launch would fail; mnist_mlp also with `nvcc -O3 -arch=sm_90`; the
#      models with 1024-thread kernels (emu_mid, emu_columns) and
#      char_transformer also as a debug build (`nvcc -G`: stack frames
#      allowed, registers x bound still checked), and under mixed_float8
#      for sm_90;
#      every value's arena offset, and the arena's size, equal the C
#      program's (one memory plan, memplan.c, for both targets);
#   2. tests/cuda/blas_abi.cu: the cuBLAS and cuBLASLt types, values and
#      functions that runtime/mp_cublas.h declares for itself equal the real
#      headers';
#      plain nvcc embeds PTX (nvcc 13: sm_75 code and compute_75 PTX);
#      tests/cuda/half_check.cu: mp_half.h's f16 / bf16 conversions equal
#      cuda_fp16.h / cuda_bf16.h's, all 65536 patterns (host side: no GPU),
#      and a mutant of mp_half.h (bf16 ties away from zero) fails it;
#      ptxas_ok (below) fails made-up reports of a spill, a stack, 129
#      registers, 72 registers at a bound of 1024 threads (also in a debug
#      build), a kernel with no bound in its name;
#   3. the built mnist_mlp program: --help and usage errors need no GPU
#      (exit 0 and 2); with data and no GPU it exits 1 with one line
#      "error: no CUDA device: ..."; with a GPU it trains 3 steps instead.
# Skipped (exit 0, with a message) only when nvcc is not installed: looked
# for on PATH, then in /usr/local/cuda/bin. NVCC_JOBS builds in parallel
# (default 2: the whole script takes about 3 minutes on 2 cores).
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
    echo "SKIP: nvcc not found (PATH, /usr/local/cuda/bin): the CUDA target is not built here"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
echo "nvcc: $NVCC ($("$NVCC" --version | tail -1))"

# ---- 1. every model builds with plain nvcc, without warnings ---------------
build() {   # build MODEL.mp NAME [nvcc flags...]: prints "ok NAME" or the failure
    local mp=$1 name=$2
    shift 2
    if ! "$MPCC" "$mp" -o "$tmp/$name.cu" 2>"$tmp/$name.mpcc"; then
        echo "FAIL $name: mpcc failed"; cat "$tmp/$name.mpcc"; return
    fi
    if ! (cd "$tmp" && "$NVCC" "$@" "$name.cu" -o "$name") >"$tmp/$name.log" 2>&1; then
        echo "FAIL $name: nvcc $* failed"; head -n 30 "$tmp/$name.log"; return
    fi
    if grep -qi "warning" "$tmp/$name.log"; then
        echo "FAIL $name: nvcc $* warns"; head -n 30 "$tmp/$name.log"; return
    fi
    local k debug=
    case " $* " in *" -G "*) debug=debug ;; esac
    if ! k=$(ptxas_ok "$tmp/$name.log" $debug); then
        echo "FAIL $name (nvcc $*): ptxas: $k"; return
    fi
    echo "ok   $name (nvcc $*; ptxas: $k)"
}
# ptxas -v's report: no stack frame, no spill, at most 128 registers in
# every kernel (a spill or a stack means local memory on every call). One
# exception: rope takes sinf and cosf of one angle, and CUDA's slow-path
# range reduction for them (|angle| > 105615, past any position) keeps a
# 7-word table in a frame of at most 32 bytes, which ptxas puts in registers
# or not by its own heuristics; the fast path never touches it.
# And in every kernel (debug builds too, where -G's frames are allowed):
# its registers, rounded up to the SM's allocation unit of 8, times its
# launch bound NT (in its name: mp_cu_k_rows<NT, F> mangles to
# "mp_cu_k_rowsILiNTE") at most an SM's 65536 registers, or a block of NT
# threads cannot be launched ("too many resources requested for launch").
ptxas_ok() {   # ptxas_ok LOG [debug]
    awk -v debug="${2:-}" '
         /Compiling entry function/ { fn = $0; sub(/.*function ./, "", fn); sub(/. for .*/, "", fn); n++
                                      nt = 0
                                      if (match(fn, /mp_cu_k_(each|rows|one)ILi[0-9]+E/)) {
                                          b = substr(fn, RSTART, RLENGTH); sub(/.*ILi/, "", b); nt = b + 0 }
                                      if (nt < 1) { print fn ": no launch bound in its name"; bad = 1 } }
         /bytes stack frame/ { trig = fn ~ /MpCuRope/ && $1 + 0 <= 32
                               if (debug == "" && (($1 + 0 > 0 && !trig) || $5 + 0 > 0 || $9 + 0 > 0)) {
                                   print "stack or spill in " fn ": " $0; bad = 1 } }
         /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1) + 0;
                                   if (r > most) most = r
                                   if (r > 128 && debug == "") { print fn " uses " r " registers"; bad = 1 }
                                   if (nt > 0 && int((r + 7) / 8) * 8 * nt > 65536) {
                                       print fn " uses " r " registers x " nt " threads > 65536"; bad = 1 }
                                   if (nt > widest) widest = nt }
         END { if (!n) { print "no ptxas report"; exit 1 }
               if (!bad) print n " kernels, at most " most " registers, blocks up to " widest " threads fit" \
                               (debug == "" ? ", no spill, no stack" : " (debug)"); exit bad }' "$1"
}
# ptxas_ok itself fails a kernel with a spill, a stack frame or 129
# registers, 72 registers where 1024 threads are launched (a -G build
# without the bound: 72 x 1024 > 65536), a kernel with no bound
fake_report() {   # fake_report "N bytes stack frame, ..." REGISTERS [BOUND]
    local fn=_Z12mp_cu_k_rowsILi${3:-256}E4MpCuEvlT0_
    [ "${3:-}" = none ] && fn=_Z1kv
    printf "ptxas info    : Compiling entry function '%s' for 'sm_75'\n    %s\nptxas info    : Used %s registers, 352 bytes cmem[0]\n" "$fn" "$1" "$2" >"$tmp/fake.log"
}
clean="0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
for r in "0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads/40/256/" \
         "16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/40/256/" \
         "$clean/129/256/" "$clean/72/1024/" "$clean/72/1024/debug" "$clean/40/none/" \
         "$clean/40/none/debug"; do
    IFS=/ read -r rep regs bound dbg <<<"$r"
    fake_report "$rep" "$regs" "$bound"
    ptxas_ok "$tmp/fake.log" $dbg >/dev/null && bad "ptxas_ok ${dbg:+(debug) }passes a kernel with $rep, $regs registers, bound $bound"
done
for r in "$clean/128/256/" "$clean/64/1024/" "$clean/64/1024/debug" "16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/200/256/debug"; do
    IFS=/ read -r rep regs bound dbg <<<"$r"
    fake_report "$rep" "$regs" "$bound"
    ptxas_ok "$tmp/fake.log" $dbg >/dev/null || bad "ptxas_ok ${dbg:+(debug) }fails a kernel with $rep, $regs registers, bound $bound"
done
export -f build ptxas_ok
export MPCC NVCC tmp
start=$(date +%s)
# mixed_float8's amax, quantising and step-end kernels (runtime/mp_cuda_fp8.h)
sed 's/^  precision      = mixed_float16$/  precision      = mixed_float8/' examples/char_transformer.mp \
    >"$tmp/char_transformer_f8.mp"
grep -q "mixed_float8" "$tmp/char_transformer_f8.mp" || bad "char_transformer_f8.mp: the precision was not replaced"
{
    echo "$tmp/char_transformer_f8.mp char_transformer_f8 -O3 -arch=sm_90 -Xptxas -v"
    for f in examples/*.mp tests/gradcheck/*.mp tests/cuda/emu_mid.mp; do
        echo "$f $(basename "$f" .mp) -Xptxas -v"
    done
    echo "examples/mnist_mlp.mp mnist_mlp_sm90 -O3 -arch=sm_90 -Xptxas -v"
    for f in tests/cuda/emu_mid.mp tests/cuda/emu_columns.mp examples/char_transformer.mp; do
        echo "$f $(basename "$f" .mp)_debug -G -Xptxas -v"
    done
} | xargs -P "${NVCC_JOBS:-2}" -L 1 bash -c 'build "$@"' _ >"$tmp/builds" 2>&1
cat "$tmp/builds"
grep -q "^FAIL" "$tmp/builds" && fail=1
n=$(grep -c "^ok" "$tmp/builds")
echo "$n programs built in $(( $(date +%s) - start ))s"
[ "$n" -ge 5 ] || bad "too few programs built ($n)"

# ---- 1b. one memory plan for both targets -------------------------------------
# every value's arena offset in train.c's model_setup is the same in
# train.cu's model_bind, and so is the arena's size (train.cu names a few
# more: the products heading fusion groups, which cuBLAS writes to memory
# while the C program's epilogues keep them in registers; memplan gives
# them their place on both targets)
for f in examples/*.mp tests/gradcheck/*.mp; do
    n=$(basename "$f" .mp)
    [ -f "$tmp/$n.cu" ] || continue
    "$MPCC" "$f" --target c -o "$tmp/$n.c" 2>/dev/null || { bad "$n: mpcc --target c failed"; continue; }
    a=$(sed -n 's/^ *\(v[0-9]*_[A-Za-z0-9_]*\) = ([a-z0-9_]* \*)(mp_arena + \([0-9]*\));$/\1 \2/p' "$tmp/$n.c")
    b=$(sed -n 's/^ *\(v[0-9]*_[A-Za-z0-9_]*\) = ([a-z0-9_]* \*)(arena + \([0-9]*\));$/\1 \2/p' "$tmp/$n.cu")
    sa=$(sed -n 's/.*mp_alloc_aligned(\([0-9]*\)).*/\1/p' "$tmp/$n.c")
    sb=$(sed -n '/mp_cu_model_desc = {/{n;s/^ *\([0-9]*\),.*/\1/p}' "$tmp/$n.cu")
    missing=$(comm -23 <(sort <<<"$a") <(sort <<<"$b"))
    if [ -z "$a" ] || [ -n "$missing" ] || [ -z "$sa" ] || [ "$sa" != "$sb" ]; then
        bad "$n: the CUDA program's arena (size $sb) differs from the C program's (size $sa)"
    fi
done
echo "ok   arena offsets and sizes: the CUDA programs use the C programs' memory plan"

# ---- 2. cuBLAS's ABI as mp_cublas.h declares it ----------------------------
if ! "$NVCC" -c -Iruntime tests/cuda/blas_abi.cu -o "$tmp/abi.o" >"$tmp/abi.log" 2>&1; then
    bad "runtime/mp_cublas.h disagrees with cuBLAS's headers:"; head -n 20 "$tmp/abi.log"
else
    echo "ok   runtime/mp_cublas.h: cuBLAS's and cuBLASLt's types, values and functions as their headers have them"
fi

# ---- 2a. plain `nvcc train.cu` runs on every GPU nvcc supports: its default
# embeds PTX (compute_75 with nvcc 13), which the driver compiles for newer GPUs
if [ -f "$tmp/mnist_mlp.cu" ]; then
    if (cd "$tmp" && "$NVCC" -dryrun mnist_mlp.cu -o x 2>&1) | grep -q "kind=ptx"; then
        echo "ok   plain nvcc embeds PTX: $( (cd "$tmp" && "$NVCC" -dryrun mnist_mlp.cu -o x 2>&1) |
            grep -o 'kind=[a-z]*,sm=[0-9]*' | sort -u | tr '\n' ' ')"
    else
        bad "plain nvcc embeds no PTX: the program would not run on GPUs newer than its default arch"
    fi
fi

# ---- 2b. f16 / bf16 conversions: runtime/mp_half.h as CUDA's own -------------
if "$NVCC" -Iruntime tests/cuda/half_check.cu -o "$tmp/half_check" >"$tmp/half.log" 2>&1; then
    "$tmp/half_check" || bad "runtime/mp_half.h rounds differently from cuda_fp16.h / cuda_bf16.h"
else
    bad "tests/cuda/half_check.cu does not build:"; head -n 20 "$tmp/half.log"
fi
# ... and it fails a mp_half.h whose bf16 rounding breaks ties away from zero
mkdir -p "$tmp/mut"
sed 's/(x + 0x7fffu + ((x >> 16) \& 1u)) >> 16/(x + 0x8000u) >> 16/' runtime/mp_half.h >"$tmp/mut/mp_half.h"
if cmp -s runtime/mp_half.h "$tmp/mut/mp_half.h"; then
    bad "the mp_half.h mutant did not apply"
elif "$NVCC" -I"$tmp/mut" -Iruntime tests/cuda/half_check.cu -o "$tmp/half_mut" >"$tmp/half_mut.log" 2>&1 &&
        ! "$tmp/half_mut" >/dev/null; then
    echo "ok   half_check catches a mp_half.h mutant (bf16 ties away from zero)"
else
    bad "half_check misses a mp_half.h mutant (bf16 ties away from zero)"
fi

# ---- 3. the program without (or with) a GPU --------------------------------
prog=$tmp/mnist_mlp
if [ -x "$prog" ]; then
    /usr/bin/python3 -c "
import numpy as np
np.save('$tmp/img.npy', np.random.RandomState(0).randint(0, 256, (256, 784)).astype(np.uint8))
np.save('$tmp/lab.npy', np.random.RandomState(1).randint(0, 10, (256,)).astype(np.int32))"
    "$prog" --help >"$tmp/help" 2>&1 || bad "--help exits $? (needs no GPU)"
    grep -q "trains model 'mnist_mlp'" "$tmp/help" || bad "--help does not say what it trains"
    "$prog" --bogus >"$tmp/usage" 2>&1
    rc=$?
    [ $rc -eq 2 ] || bad "a usage error exits $rc, expected 2"
    "$prog" --data image="$tmp/img.npy" --data label="$tmp/lab.npy" --steps 3 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if nvidia-smi -L >/dev/null 2>&1; then
        [ $rc -eq 0 ] || { bad "with a GPU, 3 steps exit $rc:"; cat "$tmp/err"; }
    else
        [ $rc -eq 1 ] || bad "without a GPU the program exits $rc, expected 1"
        [ "$(wc -l <"$tmp/err")" -eq 1 ] || { bad "without a GPU: not one line on stderr:"; cat "$tmp/err"; }
        grep -q "^mnist_mlp: error: no CUDA device: " "$tmp/err" \
            || { bad "without a GPU the message is not 'no CUDA device':"; cat "$tmp/err"; }
        echo "ok   without a GPU: $(cat "$tmp/err")"
    fi
fi
exit $fail
