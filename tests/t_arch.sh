#!/usr/bin/env bash
# t_arch.sh - examples/gpt2.mp, llama.mp, resnet18.mp, mobilenetv2.mp and
# unet.mp against their PyTorch twins (tests/py/arch.py: nanoGPT's GPT,
# llama2.c's Transformer, pytorch-cifar's ResNet-18, torchvision's
# MobileNetV2, milesial's U-Net, with the references' own module names).
#
#   1. Every example at its own (default) size compiles with mpcc and the C
#      compiler (cc -O2); both times are printed.
#   2. Each example at a small test size (its const lines rewritten: fewer,
#      narrower layers, shorter sequences, dropout 0) is trained for STEPS
#      (25) steps from the twin's initial weights (--init), batches in file
#      order (--no-shuffle: windows at offsets 0, T, 2T, ... of the token
#      stream), logging every step; tests/py/ref.py trains the twin the same
#      way (the example's own optimizer, no_decay groups, schedule and
#      warmup style, clipping) and compares each step's loss and lr:
#      float32 within 1e-4 of torch in float64, mixed_float16 within 3% of
#      torch in float32 (and not equal to it); the final parameters and
#      optimizer state (float32: each tensor's change within 1% of torch
#      float64's; MobileNetV2's within what float32 determines of it, see
#      below); then the final checkpoint is loaded into
#      the twin with load_state_dict(strict) (the tied output weight filled
#      in as the examples' headers say) and its eval loss compared with the
#      trainer's.
# Data: tiny shakespeare through build/text2bin (u16 .bin token streams),
# Fashion-MNIST through build/idx2npy --pad 2 (32x32), from ../shared/data.
# ARCH_ONLY=substring runs the matching cases (not ONLY, which run_all.sh
# uses to pick this script: ONLY=t_arch ran no case and passed); a filter
# that matches no case fails. JOBS (2) trainers at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/py/lib.sh
. tests/py/lib.sh
B=${B:-build}
STEPS=${STEPS:-25}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
DATA=../shared/data
fails=()
for t in "$B/text2bin" "$B/idx2npy"; do
    [ -x "$t" ] || { echo "FAIL: $t is not built (run make)"; exit 1; }
done

# ---- data ----------------------------------------------------------------
"$B/text2bin" "$DATA/tinyshakespeare/input.txt" "$W/train.bin" "$W/val.bin" "$W/vocab.txt" >/dev/null ||
    { echo "FAIL: text2bin"; exit 1; }
# a prefix of each stream: the windows trained on and (W - 1) * B * 3 + 1
# evaluation tokens, i.e. exactly 3 batches of windows of W = T + 1 = 17
head -c 40000 "$W/train.bin" >"$W/tok_train.bin"
head -c $(( 2 * (16 * 4 * 3 + 1) )) "$W/val.bin" >"$W/tok_val.bin"
"$B/idx2npy" --shape nchw --pad 2 --limit 512 "$DATA/fashion-mnist/train-images-idx3-ubyte.gz" "$W/fx.npy" &&
"$B/idx2npy" --limit 512 "$DATA/fashion-mnist/train-labels-idx1-ubyte.gz" "$W/fy.npy" &&
"$B/idx2npy" --shape nchw --pad 2 --limit 64 "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz" "$W/fex.npy" &&
"$B/idx2npy" --limit 64 "$DATA/fashion-mnist/t10k-labels-idx1-ubyte.gz" "$W/fey.npy" ||
    { echo "FAIL: idx2npy --pad"; exit 1; }
TOK="--data seq=$W/tok_train.bin --eval seq=$W/tok_val.bin"
FMN="--data image=$W/fx.npy --data label=$W/fy.npy --eval image=$W/fex.npy --eval label=$W/fey.npy"

# ---- 1. the examples as they are: mpcc and cc -O2 --------------------------
for ex in gpt2 llama resnet18 mobilenetv2 unet; do
    [ -n "${ARCH_ONLY:-}" ] && [[ $ex != *$ARCH_ONLY* && $ARCH_ONLY != $ex* ]] && continue
    t0=$(date +%s%N)
    if ! "$MPCC" "examples/$ex.mp" --target c -o "$W/$ex-full.c" 2>"$W/$ex-full.err"; then
        fails+=("examples/$ex.mp: mpcc failed: $(head -n 1 "$W/$ex-full.err")"); continue
    fi
    t1=$(date +%s%N)
    cc -O2 -o "$W/$ex-full" "$W/$ex-full.c" -lm 2>"$W/$ex-full.cc.err" ||
        { fails+=("examples/$ex.mp: the generated C does not build"); continue; }
    t2=$(date +%s%N)
    printf 'examples/%s.mp: mpcc %d ms, cc -O2 %d ms, %d lines of C\n' "$ex" \
        $(( (t1 - t0) / 1000000 )) $(( (t2 - t1) / 1000000 )) "$(wc -l <"$W/$ex-full.c")"
done

# ---- 2. small sizes against the twins --------------------------------------
# small EXAMPLE 'CONST=VALUE ...' [SED]: the example with those const lines
# rewritten (and the sed expression SED applied)
small() {
    local ex=$1 kv args=(-e "${3:-}")
    for kv in $2; do args+=(-e "s/^const ${kv%%=*} *=[^#]*/const ${kv%%=*} = ${kv#*=} /"); done
    sed "${args[@]}" "examples/$ex.mp" >"$W/$ex.mp"
    for kv in $2; do
        grep -q "^const ${kv%%=*} = ${kv#*=} " "$W/$ex.mp" || fails+=("examples/$ex.mp has no 'const ${kv%%=*}' line")
    done
}
# the language models' schedules shortened (warmup 5 of 30 steps) so that the
# 25 steps see the warm-up, the peak and the cosine decay
SHORT='s/warmup = 100,/warmup = 5,/; s/^  steps          = 5000$/  steps          = 30/'
small gpt2 "B=4 T=16 D=32 H=2 L=2 P=0.0" "$SHORT"
small llama "B=4 T=16 DIM=32 L=2 H=4 KV=2 MULTIPLE_OF=16 HIDDEN=96" "$SHORT"
for ex in gpt2 llama; do
    grep -q 'warmup = 5,' "$W/$ex.mp" && grep -q '^  steps          = 30$' "$W/$ex.mp" ||
        fails+=("examples/$ex.mp: its schedule lines were not rewritten")
done
# The small ResNet is chaotic at SGD's lr 0.1 (and 0.01): a ReLU input that
# changes sign between two roundings changes the gradient at once, so torch's
# own float32 and float64 runs part by more than 1e-4 after 4 to 7 steps
# (measured). At lr 1e-4 they agree over 25 steps, and the check of the final
# parameters (their change from init within 1% of torch's) holds every
# gradient and the optimizer to account.
small resnet18 "B=8 W=4" 's/optimizer   = sgd(lr = 0.1,/optimizer   = sgd(lr = 1e-4,/'
grep -q 'sgd(lr = 1e-4,' "$W/resnet18.mp" || fails+=("examples/resnet18.mp: its optimizer line was not rewritten")
# MobileNetV2 at full width (its 262 tensors), a batch of 8 and no dropout,
# over ONE step: at 32x32 its last blocks are 1x1 images, whose batch norms
# normalise 8 values per channel, and torch's own float32 and float64 runs
# part by 5e-4 at step 2 and 10% at step 4 (measured, lr 1e-3; 6% even at
# lr 1e-5 with a batch of 16), so only the first step's loss, every
# parameter after its update (all the gradients) and the checkpoint are
# comparable. Even after one step float32 leaves some tensors undetermined
# (measured: torch float32 is as far from float64 there as mpcc): a batch
# norm's weight, 1.0 changed by less than its float32 spacing; a running
# mean of zero-mean inputs (a batch norm's output, through a residual sum
# and a 1x1 conv), whose change is rounding noise; a gradient that is
# mostly cancellation (features.0.1.weight's: 4.5e-4 to 3e-2 of it across
# torch's summation orders). So the float32 case's tensors are held to what
# float32 determines, measured per tensor (ref.py --vs-float32 5 --ptol
# 1e-5): within 5x torch float32's largest difference from float64 over
# three summation orders, + 1e-5 of the change. (It was 2x until the first
# run on an AVX-512 CPU: there torch's float32 kernels come within 5.3e-4
# of float64 on features.0.1.weight's gradient in every order, where on
# the AVX2 CPU they ranged to 3e-2, while mpcc's 2.2e-3 is the same on
# both CPUs and on every MP_CPU path. The 1.001 mutants below stay far
# outside: a change of 1e-3 of the update is 2.8 times the tolerance of
# features.16.conv.1.1.bias, 30 times that of features.18.1.bias.) Of the 362 tensors compared
# 338 get less than the other cases' 1%, 169 less than 0.1% (the worst of
# mpcc's, 0.56 of its tolerance); a copy of the generated C with one batch
# norm's bias gradient (features.16.conv.1.1, features.18.1) or
# features.17.conv.0.1's weight gradient scaled by 1.001, one running
# statistic not updated (features.0.1.running_var,
# features.16.conv.1.1.running_mean) or the running variances biased fails
# it; x 1.001 where float32 determines less passes (features.10.conv.3's
# weight gradient: tolerance 1.9e-3; features.0.1's: 6e-2). At 64x64 (late
# blocks 2x2) it is no better: one features.18 batch-norm output, -2.6e-6
# in float64, rounds to the other side of ReLU6's kink in mpcc and one
# channel's gradient moves 35% where torch float32's did not.
small mobilenetv2 "B=8 P=0.0" 's/optimizer  = sgd(lr = 0.05,/optimizer  = sgd(lr = 1e-3,/'
grep -q 'sgd(lr = 1e-3,' "$W/mobilenetv2.mp" || fails+=("examples/mobilenetv2.mp: its optimizer line was not rewritten")
small unet "B=4 W=4"
UNI="--data image=$W/fx.npy --eval image=$W/fex.npy"

cases=()   # name|model|precision|tol|data|steps|more ref.py check options
# Cases left out (loudly) until their comparison is made meaningful;
# PENDING=run runs them anyway.
ARCH_PENDING=""
add() {
    [ -n "${ARCH_ONLY:-}" ] && [[ $1 != *$ARCH_ONLY* ]] && return
    if [[ " $ARCH_PENDING " == *" $1 "* ]] && [ "${PENDING:-}" != run ]; then
        echo "PENDING (left out, see ARCH_PENDING): $1"; return
    fi
    cases+=("$1|$W/$2.mp|$3|$4|$5|${6:-$STEPS}|${7:-}")
}
add gpt2_float32 gpt2 float32 1e-4 "$TOK"
add gpt2_mixed_float16 gpt2 mixed_float16 3e-2 "$TOK"
add llama_float32 llama float32 1e-4 "$TOK"
add llama_mixed_float16 llama mixed_float16 3e-2 "$TOK"
add resnet18_float32 resnet18 float32 1e-4 "$FMN"
add resnet18_mixed_float16 resnet18 mixed_float16 3e-2 "$FMN"
add mobilenetv2_float32 mobilenetv2 float32 1e-4 "$FMN" 1 "--vs-float32 5 --ptol 1e-5"
add mobilenetv2_mixed_float16 mobilenetv2 mixed_float16 3e-2 "$FMN" 1
add unet_float32 unet float32 1e-4 "$UNI"
add unet_mixed_float16 unet mixed_float16 3e-2 "$UNI"

if [ ${#cases[@]} -eq 0 ]; then
    echo "FAIL: ARCH_ONLY=${ARCH_ONLY:-} matches no case"; exit 1
fi
: >"$W/init.batch"
for c in "${cases[@]}"; do
    IFS='|' read -r name model _ <<<"$c"
    echo "init $model $W/$name.init.safetensors" >>"$W/init.batch"
done
$PY tests/py/ref.py batch "$W/init.batch" || exit 1

run_case() {
    local name=$1 model=$2 prec=$3 data=$4 steps=$5 out=$W/$1
    build_trainer "$model" "$out" --precision "$prec" >"$out.fail" || return
    # shellcheck disable=SC2086
    if ! "$out" $data --steps "$steps" --no-shuffle --init "$out.init.safetensors" --log "$out.log.jsonl" \
            --log-every 1 --eval-every "$steps" --save "$out.ckpt.safetensors" >"$out.run.out" 2>&1; then
        { echo "the trainer failed:"; tail -n 3 "$out.run.out"; } >"$out.fail"; return
    fi
    rm -f "$out.fail"
}
for c in "${cases[@]}"; do
    IFS='|' read -r name model prec tol data steps _ <<<"$c"
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n; done
    run_case "$name" "$model" "$prec" "$data" "$steps" &
done
wait

: >"$W/check.batch"
for c in "${cases[@]}"; do
    IFS='|' read -r name model prec tol data steps more <<<"$c"
    out=$W/$name
    if [ -e "$out.fail" ]; then
        fails+=("$name: $(head -n 1 "$out.fail")"); sed 's/^/    /' "$out.fail" | head -n 8; continue
    fi
    cmp="--tol $tol --dtype float64"
    [ "$prec" = float32 ] || cmp="--tol $tol --ptol 0 --etol $tol --min-diff 2e-6"
    echo "check $model $data --steps $steps --init $out.init.safetensors --log $out.log.jsonl" \
         "--ckpt $out.ckpt.safetensors $cmp $more --report $out.ref.out" >>"$W/check.batch"
done
$PY tests/py/ref.py batch "$W/check.batch" || fails+=("some cases differ from PyTorch (above)")
for c in "${cases[@]}"; do      # the per-step tables, for the log
    IFS='|' read -r name _ <<<"$c"
    [ -e "$W/$name.ref.out" ] && { echo "== $name"; cat "$W/$name.ref.out"; }
done

echo
if [ ${#fails[@]} -gt 0 ]; then
    printf 'FAIL %s\n' "${fails[@]}"
    exit 1
fi
echo "gpt2, llama, resnet18, mobilenetv2 and unet agree with their PyTorch twins"
