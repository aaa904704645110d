# lib.sh - shell helpers shared by the reference tests (source it).
#   test_tmp        a fresh folder $tmp, removed on exit; fail=0, and
#       bad MSG prints "FAIL: MSG" and sets fail=1 (a test's start)
#   build_trainer MODEL.mp OUT [mpcc options...] [-- cc options...]   (TRAINER_CC: the compiler, default cc)
#       mpcc --target c, then cc (default -O1: the same numbers as -O2,
#       which has no -ffast-math either, in two thirds of the compile time,
#       most of a test's CPU; t_warnings builds every model at -O2 and -O3;
#       -l options are put after the source); OUT is the binary, OUT.c the
#       source.
#       Prints what failed and returns 1 on failure.
#   emu_trainer MODEL.mp OUT [mpcc options...]
#       the CUDA program built for the CPU stand-in (tests/cuda/mp_cuda_emu.h)
#       as OUT (OUT.cu its source), with $CXX and $EMU_FLAGS (the data-parallel
#       build: CXX=mpicxx EMU_FLAGS=-DMP_USE_MPI); returns 2 after printing SKIP when there
#       is no C++ compiler, 1 (saying what failed) when it does not build.
#   mnist_npy DIR   the full MNIST as DIR/{train,test}_{x,y}.npy (u8 images
#       [N, 784], i32 labels), with build/idx2npy when it is built, else
#       with tests/py/data.py. Kept when present.
#   mnist_first SPLIT N X.npy Y.npy   a small MNIST subset (below)
#   pause_start N CMD...   runs a generated program (or mpirun of one) in
#       the background with the test-only hook MPCC_TEST_PAUSE
#       (runtime/mp_guard.h): it pauses after step N. Tests act on a run at
#       a known step this way, never after some time. CMD's output goes
#       where the call's does. Then, one line at a time:
#   pause_next      waits for the next word: "paused after step K pid P
#       signal S" (sets paused_step, paused_pid, paused_sig) or, once CMD
#       has ended, "exit RC" (sets exit_rc); the line is in pause_line.
#       Returns 1, having killed CMD, if nothing came in PAUSE_SAFETY (300)
#       seconds: a safety net against a hang, never a pass.
#   pause_say WORD  tell (say it again), step (pause after the next step
#       too) or run (go on)
#   pause_signal SIG   sends SIG to the paused program and waits (tell)
#       until its handler has run: the program reports the signal caught
#   pause_end       waits for CMD's subshell, closes and removes the FIFOs
PY=/usr/bin/python3
MPCC=${MPCC:-./mpcc}

build_trainer() {
    local model=$1 out=$2; shift 2
    local mp=() ccopt=() libs=(-lm) a
    while [ $# -gt 0 ] && [ "$1" != -- ]; do mp+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    for a in "$@"; do    # libraries go after the source, for the linker
        if [[ $a == -l* ]]; then libs=("$a" "${libs[@]}"); else ccopt+=("$a"); fi
    done
    [ ${#ccopt[@]} -eq 0 ] && ccopt=(-O1)
    if ! "$MPCC" "$model" --target c "${mp[@]}" -o "$out.c" 2>"$out.mpcc.err"; then
        echo "mpcc failed on $model (${mp[*]}):"; head -n 20 "$out.mpcc.err"; return 1
    fi
    if ! "${TRAINER_CC:-cc}" "${ccopt[@]}" -o "$out" "$out.c" "${libs[@]}" 2>"$out.cc.err"; then
        echo "the generated C of $model does not build (${TRAINER_CC:-cc} ${ccopt[*]}):"; head -n 20 "$out.cc.err"; return 1
    fi
}

test_tmp() {
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fail=0
}
bad() { echo "FAIL: $*"; fail=1; }

emu_trainer() {
    local model=$1 out=$2; shift 2
    local cxx=${CXX:-$(command -v g++ || command -v c++ || command -v clang++ || true)}
    [ -n "$cxx" ] || { echo "SKIP: no C++ compiler (g++): the CUDA program cannot run on the CPU here"; return 2; }
    "$MPCC" "$model" "$@" -o "$out.cu" 2>"$out.build" &&
        "$cxx" -std=c++17 -O1 -x c++ -DMP_CU_EMU ${EMU_FLAGS:-} -include tests/cuda/mp_cuda_emu.h \
            "$out.cu" -o "$out" -lm 2>>"$out.build" ||
        { echo "the CUDA program of $model does not build for the CPU:"; head -n 20 "$out.build"; return 1; }
}

mnist_npy() {
    local dir=$1 src=../shared/data/mnist f
    mkdir -p "$dir"
    [ -e "$dir/test_y.npy" ] && return 0
    if [ -x build/idx2npy ]; then
        build/idx2npy $src/train-images-idx3-ubyte.gz "$dir/train_x.npy" &&
        build/idx2npy $src/train-labels-idx1-ubyte.gz "$dir/train_y.npy" &&
        build/idx2npy $src/t10k-images-idx3-ubyte.gz "$dir/test_x.npy" &&
        build/idx2npy $src/t10k-labels-idx1-ubyte.gz "$dir/test_y.npy" && return 0
        echo "build/idx2npy failed; converting in Python"
    fi
    $PY - "$dir" <<'PYEOF'
import sys, os, numpy as np
sys.path.insert(0, "tests/py")
import data
for split, name in (("train", "train"), ("t10k", "test")):
    x, y = data.mnist(split)
    np.save(os.path.join(sys.argv[1], name + "_x.npy"), x)
    np.save(os.path.join(sys.argv[1], name + "_y.npy"), y)
PYEOF
}

# mnist_first SPLIT N X.npy Y.npy: the first N images (u8 [N, 784]) and
# labels (i32) of MNIST's 'train' or 't10k' split
mnist_first() { $PY tests/py/data.py --mnist "$@"; }

# jq-free JSONL access: jsonl_field FILE FIELD -> one value per training line
jsonl_field() {
    $PY -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l) if l.strip() else {}
    if sys.argv[2] in o and "eval" not in o: print(o[sys.argv[2]])' "$1" "$2"
}

# last_eval FILE KEY -> the value of KEY in the last eval line
last_eval() {
    $PY -c 'import json,sys
ev = [json.loads(l)["eval"] for l in open(sys.argv[1]) if l.strip() and "eval" in json.loads(l)]
print(ev[-1][sys.argv[2]] if ev else "none")' "$1" "$2"
}

# ---- pausing a run at a step (MPCC_TEST_PAUSE, test-only) ------------------
# The FIFOs PREFIX.at (program -> test) and PREFIX.go (test -> program) are
# held open read-write here as fds 7 and 8, so that no open blocks; CMD's
# subshell adds "exit RC" to PREFIX.at when CMD ends.
pause_n=0
pause_start() {
    local n=$1; shift
    pause_n=$((pause_n + 1))
    pause_fifo=$tmp/pause$pause_n
    mkfifo "$pause_fifo.at" "$pause_fifo.go" || return 1
    exec 7<>"$pause_fifo.at" 8<>"$pause_fifo.go"
    ( MPCC_TEST_PAUSE="$n:$pause_fifo" "$@" 7>&- 8>&-; echo "exit $?" >&7 ) &
    pause_job=$!
    paused_pid= exit_rc=
}
pause_next() {
    local w
    if ! read -r -t "${PAUSE_SAFETY:-300}" pause_line <&7; then
        pause_line="nothing from the program in ${PAUSE_SAFETY:-300} s (killed)"
        pkill -KILL -P "$pause_job" 2>/dev/null
        return 1
    fi
    case $pause_line in
    "paused after step "*) read -r w w w paused_step w paused_pid w paused_sig <<<"$pause_line" ;;
    "exit "*) exit_rc=${pause_line#exit } ;;
    esac
    return 0
}
pause_say() { echo "$1" >&8; }
pause_signal() {
    local want
    want=$(kill -l "$1") || return 1
    kill -s "$1" "$paused_pid" || return 1
    paused_sig=0
    while [ "$paused_sig" != "$want" ]; do      # each turn waits for the program's word
        pause_say tell
        pause_next && [ -z "$exit_rc" ] || return 1
    done
}
pause_end() {
    wait "$pause_job" 2>/dev/null
    exec 7>&- 8>&-
    rm -f "$pause_fifo.at" "$pause_fifo.go"
}

# small_models GLOB...: the models of GLOB, one a line, the examples whose
# steps take seconds at a size a test trains in a fraction of one (a copy
# with a smaller batch: the same graph, kernels and code paths at
# the batch's size; the sequence models keep their positions, so their
# products stay hundreds of rows tall; resnet18 narrowed too, W 4: a
# thousandth of its ~220 GFLOP a step) -- the model lists of t_fuse,
# t_memplan and t_faults (the sanitized runs: mobilenetv2's took 68 s at
# batch 64, unet's 25 s). The copies are $B/small-models/NAME.mp, one path
# for every test, since a program names its model's file: t_fuse's and
# t_memplan's programs of a model are then one build of the compile cache.
small_models() {
    local mp n b w dir=${B:-build}/small-models
    mkdir -p "$dir"
    for mp in "$@"; do
        n=$(basename "$mp" .mp) w=
        case $mp in
        examples/resnet18.mp) b=8 w=4 ;;
        examples/mobilenetv2.mp | examples/unet.mp | examples/char_gru.mp) b=8 ;;
        examples/vae.mp | examples/mnist_cnn.mp) b=16 ;;
        examples/gpt2.mp | examples/llama.mp | examples/char_transformer.mp) b=4 ;;
        *) echo "$mp"; continue ;;
        esac
        # (written whole, then renamed: tests running at once write the same text)
        sed -E "s/^const B = [0-9]+( |$)/const B = $b\1/; ${w:+s/^const W = [0-9]+( |$)/const W = $w\\1/}" "$mp" >"$dir/$n.mp.$$"
        if ! grep -Eq "^const B = $b( |$)" "$dir/$n.mp.$$" ||
            { [ -n "$w" ] && ! grep -Eq "^const W = $w( |$)" "$dir/$n.mp.$$"; }; then
            echo "small_models: $mp has no 'const B = ' (or 'const W = ') line to shrink" >&2
            rm -f "$dir/$n.mp.$$"
            echo "$mp"
            continue
        fi
        mv -f "$dir/$n.mp.$$" "$dir/$n.mp"
        echo "$dir/$n.mp"
    done
}

# small_opt MODEL.mp: the cc optimisation t_fuse and t_memplan build
# MODEL's 3-step programs at (the same in both: the compile cache builds
# their common program once): -O0, the cheapest compile, but -Og for a model
# over 1 GFLOP a step (its plan's memory.flops: gpt2, llama, unet, ...),
# whose runs at -O0 take longer than the compile (-Og runs 4x faster). The
# same IEEE arithmetic either way (no -march: no FMA contraction).
# (small_opt MODEL.mp FLOPS: the same with another threshold)
small_opt() {
    "$MPCC" "$1" --dump-plan=json 2>/dev/null |
        $PY -c 'import json, sys; print("-Og" if json.load(sys.stdin)["memory"]["flops"] > float(sys.argv[1]) else "-O0")' "${2:-1e9}"
}
