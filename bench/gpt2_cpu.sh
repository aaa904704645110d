#!/usr/bin/env bash
# gpt2_cpu.sh - GPT-2 small (124M) on the CPU (issue 22): mpcc's generated C
# trainer against PyTorch eager (nanoGPT's model) and, when given, llm.c's
# train_gpt2.c, with the same threads, from the same initial parameters, on
# the same batches. Not in CI.
#
#   bench/gpt2_cpu.sh                      THREADS=2 STEPS=20 WARMUP=3
#   LLMC=~/llm.c bench/gpt2_cpu.sh         with llm.c's row (a checkout of github.com/karpathy/llm.c)
#   L=2 STEPS=3 WARMUP=1 bench/gpt2_cpu.sh a quick run of the whole script (2 layers)
#
# The model: examples/gpt2.mp with GPT-2 small's sizes written into its
# constants (V 50257, T 64, D 768, H 12, L 12, dropout 0; B 4: llm.c's
# train_gpt2.c's batch) and its precision line set to each row's: float32,
# mixed_bfloat16, mixed_float16. Each is built as its header's "Faster"
# line says (CFLAGS, default -O3 -march=native -fopenmp). B, T, V, D, H, L
# in the environment change the sizes.
#
# Rows:
# - mpcc float32, mixed_bfloat16, mixed_float16: the trainer with --init
#   (the common parameters) --no-shuffle --log-every 1; a step's time is
#   the time between the arrivals of its log line and the one before on the
#   trainer's standard error (the log's samples_per_s is a whole number:
#   too coarse at seconds a step).
# - PyTorch eager float32, and torch.autocast('cpu', bfloat16) (TORCH_BF16=0
#   leaves it out): tests/py/arch.py's GPT (nanoGPT's model.py as torch 1.13
#   runs it: attention by mask, softmax and product), trained as the train
#   block says (AdamW with nanoGPT's decay groups, cosine schedule,
#   clipping: tests/py/ref.py), by bench/gpt2_torch.py; a step's time is
#   time.perf_counter around it, batch gather included.
# - llm.c float32 (LLMC=DIR, a checkout of karpathy/llm.c; without it the
#   row is left out and the report says so): a copy of DIR/train_gpt2.c,
#   patched with sed in the work folder (B and T set; the steps loop cut
#   to WARMUP + STEPS; the validation and generation in the loop switched
#   off; the training loader's shuffle off, so that it takes mpcc's
#   --no-shuffle batches), built with LLMC_CFLAGS (its Makefile's: -Ofast
#   -march=native -fopenmp -DOMP) against DIR's llmc/ headers; its
#   checkpoint gpt2_124M.bin written from the common parameters (wte padded
#   to a multiple of 128 rows with zeros, as llm.c pads it), its token
#   files from the same stream; a step's time is its own "(took X ms)".
#   llm.c computes the tanh GELU (the others the exact erf one) and updates
#   with its own AdamW (lr 1e-4, no decay, no schedule, no clipping): the
#   same model and batches, another optimizer step.
#
# Checks before anything is reported (exit 1 otherwise, no table): the
# step-1 loss (the same forward pass from the same parameters on the same
# batch) of PyTorch float32 within TOL (1e-4) relative of mpcc float32's;
# llm.c's within LLMC_TOL (1e-3: its tanh GELU) of it; each mixed row's
# within MIXED_TOL (2e-2) of its own float32 row.
#
# Data: tiny shakespeare (TEXT, default ../shared/data/tinyshakespeare/input.txt)
# as character ids (build/text2bin, nanoGPT's shakespeare_char: ids below
# 65, far inside V), windows of T + 1 characters back to back.
# Threads: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=THREADS for
# every row (torch.set_num_threads too), each run under `taskset -c` of
# THREADS CPUs on distinct cores when the machine has more; OMP_WAIT_POLICY
# passive, unless set, when the load average at the start is above half the
# CPUs (as bench/vs_frameworks.sh, whose header says why).
# Times: the median of STEPS steps after WARMUP (at least 1) untimed ones.
#
# Output: the table, the machine (CPU model and AVX-512 flags, threads,
# load) and the ratios on stdout and in bench/out/gpt2_cpu.md (ignored by
# git). Work files go to a temporary folder, removed at the end (KEEP=1
# keeps it and says where; the initial parameters alone are 0.5 GB at
# full size).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
MPCC=${MPCC:-./mpcc}
THREADS=${THREADS:-2}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
B=${B:-4} T=${T:-64} V=${V:-50257} D=${D:-768} H=${H:-12} L=${L:-12}
TOL=${TOL:-1e-4}
MIXED_TOL=${MIXED_TOL:-2e-2}
LLMC_TOL=${LLMC_TOL:-1e-3}
CFLAGS=${CFLAGS:--O3 -march=native -fopenmp}
LLMC=${LLMC:-}
LLMC_CFLAGS=${LLMC_CFLAGS:--Ofast -march=native -fopenmp -DOMP}
TORCH_BF16=${TORCH_BF16:-1}
TEXT=${TEXT:-../shared/data/tinyshakespeare/input.txt}
MD=bench/out/gpt2_cpu.md
PRECS=(float32 mixed_bfloat16 mixed_float16)
die() { echo "gpt2_cpu.sh: $*" >&2; exit 2; }
say() { echo "gpt2_cpu.sh: $*" >&2; }
fail() {   # fail FILE MSG: the last lines of FILE (where it exists), then MSG, exit 2
    [ ! -f "$1" ] || tail -n "${3:-5}" "$1" >&2
    die "$2"
}

for v in THREADS STEPS WARMUP B T V D H L; do
    if ! [[ ${!v} =~ ^[0-9]+$ ]] || [ "${!v}" = 0 ]; then die "$v=${!v}: expected a whole number above 0"; fi
done
[ $((D % H)) = 0 ] || die "D=$D is not a multiple of H=$H"
[ -f "$TEXT" ] || die "no text at $TEXT (TEXT=path/to/input.txt: tiny shakespeare, see ../shared/data/README.md)"
"$PY" -c 'import torch, numpy' 2>/dev/null ||
    die "$PY with torch and numpy is needed (Debian: apt-get install python3-torch python3-numpy)"
if [ -n "$LLMC" ]; then
    { [ -f "$LLMC/train_gpt2.c" ] && [ -f "$LLMC/llmc/dataloader.h" ]; } ||
        die "LLMC=$LLMC: no train_gpt2.c and llmc/dataloader.h there (a checkout of github.com/karpathy/llm.c)"
    LLMC=$(cd "$LLMC" && pwd)
fi
# ./mpcc carries the runtime it pastes into every trainer: always brought
# up to date with the tree (a stale one once timed a runtime no longer
# there); an MPCC given in the environment is taken as it is
if [ "$MPCC" = ./mpcc ]; then
    make -j"$THREADS" mpcc build/text2bin >/dev/null || die "make mpcc build/text2bin failed"
fi
[ -x "$MPCC" ] || die "MPCC=$MPCC: no such program"
[ -x build/text2bin ] || make build/text2bin >/dev/null || die "make build/text2bin failed"

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
BUSY=$(awk -v n="$(nproc)" '{ print ($1 > n / 2) }' <<<"$LOAD")
START=$(date -u '+%Y-%m-%d %H:%M UTC')
W=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_cpu.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then
    trap 'say "work files kept in $W"' EXIT
else
    trap 'rm -rf "$W"' EXIT
fi
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$W/res" bench/out

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
if [ "$BUSY" = 1 ]; then export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}; fi
CPUS=$($PY bench/vs_common.py cpus "$THREADS")
PIN=()
if [ -n "$CPUS" ]; then
    command -v taskset >/dev/null || die "taskset (util-linux) is needed to hold every row to $THREADS CPUs"
    PIN=(taskset -c "$CPUS")
fi

# ---- the model at each precision, the data, the common initial parameters ----
for prec in "${PRECS[@]}"; do
    sed -E -e "s/^const B = .*/const B = $B/" -e "s/^const T = .*/const T = $T/" \
        -e "s/^const V = .*/const V = $V/" -e "s/^const D = .*/const D = $D/" \
        -e "s/^const H = .*/const H = $H/" -e "s/^const L = .*/const L = $L/" \
        -e "s/^const P = .*/const P = 0.0/" -e "s/^( *precision *= *)[a-z_0-9]+.*/\1$prec/" \
        examples/gpt2.mp >"$W/gpt2_$prec.mp"
    for line in "const B = $B" "const T = $T" "const V = $V" "const D = $D" "const H = $H" \
        "const L = $L" "const P = 0.0"; do
        grep -qx "$line" "$W/gpt2_$prec.mp" || die "examples/gpt2.mp: no '${line% =*} = ' line to rewrite"
    done
    grep -Eq "^ *precision *= *$prec\$" "$W/gpt2_$prec.mp" || die "examples/gpt2.mp: no 'precision = ' line to rewrite"
done
vocab=$(build/text2bin "$TEXT" "$W/train.bin" "$W/val.bin" "$W/vocab.txt") || die "build/text2bin failed on $TEXT"
vocab=$(sed -n 's/^vocab_size \([0-9]*\).*/\1/p' <<<"$vocab")
[ -n "$vocab" ] || die "build/text2bin did not print 'vocab_size N'"
[ "$vocab" -le "$V" ] || die "V=$V is smaller than the text's $vocab distinct characters"
VP=$(((V + 127) / 128 * 128))   # llm.c's padded vocabulary (50304 for 50257)
say "initial parameters (nanoGPT's init, seed 0)"
llmc_ckpt=()
[ -z "$LLMC" ] || { mkdir -p "$W/llmc/dev/data/tinyshakespeare"; llmc_ckpt=(--llmc "$W/llmc/gpt2_124M.bin" --vp "$VP"); }
"$PY" bench/gpt2_torch.py init "$W/gpt2_float32.mp" "$W/init.safetensors" --seed 0 "${llmc_ckpt[@]}" >"$W/nparams" ||
    die "writing the initial parameters failed"
nparams=$("$MPCC" "$W/gpt2_float32.mp" --dump-plan=json | "$PY" -c 'import json, sys, math
print(sum(math.prod(p["shape"]) for p in json.load(sys.stdin)["params"] if p["trainable"]))')
[ "$nparams" = "$(cat "$W/nparams")" ] || die "mpcc's plan has $nparams parameters, the PyTorch twin $(cat "$W/nparams")"

# ---- mpcc ---------------------------------------------------------------------
for prec in "${PRECS[@]}"; do
    bin=$W/gpt2_$prec
    say "mpcc $prec: mpcc --target c, cc $CFLAGS"
    "$MPCC" "$bin.mp" --target c -o "$bin.c" 2>"$bin.mpcc.err" || fail "$bin.mpcc.err" "mpcc failed on $bin.mp" 20
    # shellcheck disable=SC2086
    cc $CFLAGS -o "$bin" "$bin.c" -lm 2>"$bin.cc.err" || fail "$bin.cc.err" "cc $CFLAGS failed on $bin.c" 20
done
for prec in "${PRECS[@]}"; do
    bin=$W/gpt2_$prec
    say "mpcc $prec: $((WARMUP + STEPS)) steps"
    "$PY" bench/gpt2_torch.py mpcc-run --log "$bin.jsonl" --row "mpcc $prec" --warmup "$WARMUP" \
        --params "$nparams" --out "$W/res/mpcc_$prec.json" --stderr "$bin.run.out" -- \
        "${PIN[@]}" "$bin" --data seq="$W/train.bin" --no-shuffle --init "$W/init.safetensors" \
        --steps $((WARMUP + STEPS)) --log-every 1 --log "$bin.jsonl" ||
        fail "$bin.run.out" "the mpcc $prec trainer failed"
done

# ---- PyTorch eager ------------------------------------------------------------
gaps=()
for mode in float32 autocast_bf16; do
    [ $mode = float32 ] || [ "$TORCH_BF16" = 1 ] || { gaps+=("- PyTorch autocast bfloat16: left out (TORCH_BF16=0)"); continue; }
    say "PyTorch eager $mode: $((WARMUP + STEPS)) steps"
    if ! "${PIN[@]}" "$PY" -W ignore bench/gpt2_torch.py train "$W/gpt2_float32.mp" --data seq="$W/train.bin" \
        --init "$W/init.safetensors" --mode $mode --steps "$STEPS" --warmup "$WARMUP" \
        --out "$W/res/torch_$mode.json" 2>"$W/torch_$mode.err"; then
        tail -n 3 "$W/torch_$mode.err" >&2
        [ $mode != float32 ] || die "PyTorch float32 failed"
        gaps+=("- PyTorch autocast bfloat16: left out, PyTorch stopped with \`$(tail -n 1 "$W/torch_$mode.err")\`")
        continue
    fi
    cat "$W/torch_$mode.err" >&2
done

# ---- llm.c ----------------------------------------------------------------------
llmc_line="not run (LLMC=path/to/llm.c-checkout adds its row)"
if [ -n "$LLMC" ]; then
    src=$W/llmc/train_gpt2.c
    cp "$LLMC/train_gpt2.c" "$src"
    patch_llmc() {   # patch_llmc OLD NEW: one sed of a fixed line, which must be there
        grep -qF "$1" "$src" || die "LLMC=$LLMC: train_gpt2.c has no line '$1' (another version than this script patches)"
        local o n
        o=$(printf '%s' "$1" | sed 's/[][\.*^$/]/\\&/g')
        n=$(printf '%s' "$2" | sed 's/[\/&]/\\&/g')
        sed -i "s/$o/$n/" "$src"
        grep -qF "$2" "$src" || die "patching llm.c's train_gpt2.c failed at '$1'"
    }
    patch_llmc "int B = 4;" "int B = $B;"
    patch_llmc "int T = 64;" "int T = $T;"
    patch_llmc "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);" \
        "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 0); /* gpt2_cpu.sh: no shuffle */"
    patch_llmc "for (int step = 0; step <= 40; step++) {" \
        "for (int step = 0; step < $((WARMUP + STEPS)); step++) { /* gpt2_cpu.sh */"
    patch_llmc "if (step % 10 == 0) {" "if (0) { /* gpt2_cpu.sh: no validation */"
    patch_llmc "if (step > 0 && step % 20 == 0) {" "if (0) { /* gpt2_cpu.sh: no generation */"
    say "llm.c: cc $LLMC_CFLAGS (train_gpt2.c of $LLMC, patched)"
    # shellcheck disable=SC2086
    cc $LLMC_CFLAGS -Wno-unused-result -I "$LLMC" -o "$W/llmc/train_gpt2" "$src" -lm 2>"$W/llmc/cc.err" ||
        fail "$W/llmc/cc.err" "llm.c's train_gpt2.c did not build" 20
    "$PY" bench/gpt2_torch.py llmc-tokens "$W/train.bin" "$W/llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
    "$PY" bench/gpt2_torch.py llmc-tokens "$W/val.bin" "$W/llmc/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
    say "llm.c: $((WARMUP + STEPS)) steps"
    (cd "$W/llmc" && "${PIN[@]}" ./train_gpt2 >run.out 2>&1) || fail "$W/llmc/run.out" "llm.c's train_gpt2 failed"
    lp=$(sed -n 's/^num_parameters: //p' "$W/llmc/run.out")
    "$PY" bench/gpt2_torch.py llmc-log "$W/llmc/run.out" --warmup "$WARMUP" --params "${lp:-0}" \
        --out "$W/res/llmc.json"
    rev=$(git -C "$LLMC" rev-parse --short HEAD 2>/dev/null || true)
    llmc_line="$LLMC${rev:+ at $rev}, built with \`cc $LLMC_CFLAGS\`; train_gpt2.c patched by sed as this script's header says; its parameter count includes wte's $((VP - V)) padding rows"
else
    gaps+=("- llm.c: $llmc_line")
fi

# ---- the report -----------------------------------------------------------------
avx512=$(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//')
cat >"$W/meta.md" <<EOF
# GPT-2 small on the CPU: mpcc against PyTorch eager and llm.c (issue 22)

\`THREADS=$THREADS STEPS=$STEPS WARMUP=$WARMUP bench/gpt2_cpu.sh\` (its header says how it measures):
examples/gpt2.mp at B $B, T $T, V $V, D $D, H $H, L $L, dropout 0, from the same initial parameters
(nanoGPT's init) on the same batches of tiny shakespeare (character ids); median ms per training step
(forward, backward, optimizer) over $STEPS steps after $WARMUP warm-up step(s).

Run of $START, mpcc at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- compiler runtime || echo ' + uncommitted changes').

- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) CPUs; AVX-512 flags: ${avx512:-none}
- threads: $THREADS (${PIN[*]:-no taskset: this process may use only $THREADS CPUs}; OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=$THREADS, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset})
- load average at the start: $LOAD, at the end: $(cut -d' ' -f1-3 /proc/loadavg)$([ "$BUSY" = 0 ] || echo "; more than half of the $(nproc) CPUs were busy with other work: the times are disturbed (rerun on a quiet machine)")
- $(cc --version | head -n 1); mpcc's trainers built with \`cc $CFLAGS\`
- PyTorch $("$PY" -c 'import torch; print(torch.__version__)') eager (tests/py/arch.py's GPT, nanoGPT's model.py), Python $("$PY" -c 'import platform; print(platform.python_version())')
- llm.c: $llmc_line
- mpcc and PyTorch train as examples/gpt2.mp's train block says (AdamW, cosine schedule, clipping at 1.0); llm.c its own way (AdamW at lr 1e-4, no decay, no clipping, tanh GELU)
$(printf '%s\n' "${gaps[@]}")
EOF
"$PY" bench/gpt2_torch.py report "$W"/res/*.json --meta "$W/meta.md" --tol "$TOL" --mixed-tol "$MIXED_TOL" \
    --llmc-tol "$LLMC_TOL" --md "$MD" || exit 1
say "written to $MD"
