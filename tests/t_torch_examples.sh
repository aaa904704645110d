#!/usr/bin/env bash
# t_torch_examples.sh - generated C trainers against PyTorch, step by step.
#
# For every case: the model's PyTorch twin (tests/py/models.py) writes the
# initial parameters; mpcc compiles the model (--target c, the case's
# precision); the trainer runs from that init with batches in file order,
# logging every step and evaluating at the end; tests/py/ref.py trains the
# twin the same way and compares each step's loss and lr (float32: 1e-4
# relative to torch in float64; mixed_float16 and mixed_bfloat16 against
# torch in float32: a few percent), the final tensors and optimizer state (float32 only), and
# loads the final checkpoint into the twin with load_state_dict to compare
# the evaluation. Torch starts twice (all inits, all checks); trainers are
# built and run JOBS (2) at a time.
#
# Cases: every optimizer / schedule / clipping / accumulate variant of
# tests/models/mlp_small.mp, the op zoos (zoo2: the additions; zoo3: comparisons,
# masks, where, detach, tensors of constants), a CNN with
# batch_norm, a MobileNetV2-style net (mbconv: depthwise, grouped, dilated,
# "same", conv1d), a char transformer, a GPT with chunk/slice/concat/expand/arange,
# metrics, a recurrent network written with a for loop (rnn_loop), the GRU
# language model (examples/char_gru.mp, float32 within 1e-6 a step), every
# examples/*.mp, each in float32 and mixed precision; and
# *_emulated cases, where the MLP twin rounds to f16 / bf16 exactly where
# the precision plan does, so mixed precision is held to 1e-4 (f16) /
# 1e-3 (bf16) too. CASES=substring runs the matching cases (not ONLY:
# run_all.sh's ONLY=t_torch_examples picks this script and all its cases).
set -uo pipefail
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
W=${B:-build}/t_torch_examples
D=$W/data
mkdir -p "$W"
$PY tests/py/data.py "$D" || exit 1

fails=()
cases=()     # "name|model|precision|steps|tol|data|eval"

# variant NAME 'train line' ...: mlp_small.mp with its optimizer line
# replaced by the given lines (steps stays 40).
variant() {
    local name=$1; shift
    local lines; lines=$(printf '  %s\\n' "$@")
    sed "/^  optimizer = /c\\
${lines%\\n}" tests/models/mlp_small.mp > "$W/$name.mp"
}

# Cases that fail because of an open bug in mpcc, left out (loudly) until it
# is fixed; PENDING=run runs them anyway.
#   (none now; metric_alias waited here for the memplan fix of metric liveness)
PENDING_CASES=""

# run_case NAME MODEL.mp PRECISION STEPS TOL DATA EVAL: adds a case.
#   DATA / EVAL: comma-separated input=file-stem pairs (files in $D)
run_case() {
    [ -n "${CASES:-}" ] && [[ $1 != *$CASES* ]] && return
    if [[ " $PENDING_CASES " == *" $1 "* ]] && [ "${PENDING:-}" != run ]; then
        echo "PENDING (left out until an mpcc bug is fixed, see PENDING_CASES): $1"
        return
    fi
    cases+=("$1|$2|$3|$4|$5|$6|$7")
}

# the trainer's --data / --eval arguments of a case
case_args() {
    local data=$1 ev=$2 p
    for p in ${data//,/ }; do printf -- '--data %s ' "${p%%=*}=$D/${p#*=}.npy"; done
    for p in ${ev//,/ }; do printf -- '--eval %s ' "${p%%=*}=$D/${p#*=}.npy"; done
}

# build and run one case's trainer; a failure is written to $out.fail
train_case() {
    local name=$1 model=$2 prec=$3 steps=$4 data=$5 ev=$6 out=$W/$1
    rm -f "$out.fail" "$out.log.jsonl" "$out.out.safetensors"
    if ! "$MPCC" "$model" --target c --precision "$prec" -o "$out.c" 2>"$out.mpcc.err"; then
        { echo "mpcc failed"; head -n 5 "$out.mpcc.err"; } >"$out.fail"; return
    fi
    # The compile is most of this test's CPU: -O0, the numbers of -O1 and
    # -O2 (no -ffast-math, no FMA contraction without -march) in a third of
    # -O1's compile time; -Og (-O1's run time, half its compile time) for
    # the examples that train for seconds
    local opt=-O0
    case $model in examples/char_transformer.mp | examples/char_gru.mp) opt=-Og ;; esac
    if ! cc "$opt" -o "$out" "$out.c" -lm 2>"$out.cc.err"; then
        { echo "the generated C does not build"; grep -m5 -E 'error|undefined reference|warning: implicit' "$out.cc.err"; } >"$out.fail"; return
    fi
    # shellcheck disable=SC2046
    if ! "$out" $(case_args "$data" "$ev") --steps "$steps" --no-shuffle --init "$out.init.safetensors" \
            --log "$out.log.jsonl" --log-every 1 --eval-every "$steps" \
            --save "$out.out.safetensors" >"$out.run.out" 2>&1; then
        { echo "the trainer failed"; tail -n 3 "$out.run.out"; } >"$out.fail"
    fi
}

MNIST=image=mnist_x,label=mnist_y
MNIST_E=image=mnist_ex,label=mnist_ey
DIGITS=x=digits_x,label=digits_y,target=digits_t
DIGITS_E=x=digits_ex,label=digits_ey,target=digits_et
SHAKE=tokens=shake_x,targets=shake_y
SHAKE_E=tokens=shake_ex,targets=shake_ey
SHAKEV=tokens=shakev_x,targets=shakev_y
SHAKEV_E=tokens=shakev_ex,targets=shakev_ey

variant mlp_sgd             'optimizer = sgd(lr = 0.1)'
variant mlp_sgd_momentum    'optimizer = sgd(lr = 0.05, momentum = 0.9)'
variant mlp_sgd_nesterov_wd 'optimizer = sgd(lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 1e-3)'
variant mlp_sgd_wd          'optimizer = sgd(lr = 0.1, weight_decay = 0.01)'
variant mlp_adam            'optimizer = adam(lr = 1e-3)'
variant mlp_adam_keys       'optimizer = adam(lr = 1e-3, beta1 = 0.8, beta2 = 0.99, eps = 1e-6, weight_decay = 0.01)'
variant mlp_adamw           'optimizer = adamw(lr = 2e-3)'
variant mlp_rmsprop         'optimizer = rmsprop(lr = 1e-3)'
variant mlp_rmsprop_all     'optimizer = rmsprop(lr = 5e-4, alpha = 0.9, eps = 1e-6, momentum = 0.8, centered = true, weight_decay = 0.01)'
variant mlp_rmsprop_centered 'optimizer = rmsprop(lr = 1e-3, centered = true, no_decay = [vectors], weight_decay = 0.1)'
variant mlp_cosine_warmup   'optimizer = adamw(lr = 2e-3, weight_decay = 0.1)' 'lr_schedule = cosine(warmup = 5, min = 1e-4)'
variant mlp_cosine          'optimizer = sgd(lr = 0.1, momentum = 0.5)' 'lr_schedule = cosine(min = 0.01)'
variant mlp_linear_warmup   'optimizer = adam(lr = 2e-3)' 'lr_schedule = linear(warmup = 8)'
variant mlp_linear          'optimizer = sgd(lr = 0.2)' 'lr_schedule = linear(warmup = 0)'
variant mlp_clip            'optimizer = adam(lr = 1e-3)' 'clip_grad_norm = 0.5'
variant mlp_accumulate      'optimizer = sgd(lr = 0.1, momentum = 0.9)' 'accumulate = 2'
variant mlp_accum_clip      'optimizer = adam(lr = 2e-3)' 'accumulate = 3' 'clip_grad_norm = 0.3' 'lr_schedule = cosine(warmup = 3)'
# no_decay parameter groups (LANGUAGE.md), and the same runs without them:
# the negative controls below check that ignoring the flag would be caught
variant mlp_nodecay_vectors 'optimizer = adamw(lr = 2e-3, weight_decay = 0.5, no_decay = [vectors])'
variant mlp_decay_vectors   'optimizer = adamw(lr = 2e-3, weight_decay = 0.5)'
variant mlp_nodecay_glob    'optimizer = sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.05, no_decay = ["h.*"])'
variant mlp_decay_glob      'optimizer = sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.05)'
# nanoGPT's warm-up (lr*k/(W+1)) against its get_lr; mlp_cosine_warmup above keeps torch's
variant mlp_nanogpt_warmup  'optimizer = adamw(lr = 2e-3, weight_decay = 0.1)' 'lr_schedule = cosine(warmup = 5, min = 1e-4, warmup_style = "nanogpt")'
variant mlp_nanogpt_linear  'optimizer = sgd(lr = 0.1)' 'lr_schedule = linear(warmup = 4, warmup_style = "nanogpt")'

for v in mlp_sgd mlp_sgd_momentum mlp_sgd_nesterov_wd mlp_sgd_wd mlp_adam mlp_adam_keys \
         mlp_adamw mlp_cosine_warmup mlp_cosine mlp_linear_warmup mlp_linear mlp_clip \
         mlp_accumulate mlp_accum_clip mlp_nodecay_vectors mlp_nodecay_glob mlp_nanogpt_warmup \
         mlp_nanogpt_linear mlp_rmsprop mlp_rmsprop_all mlp_rmsprop_centered; do
    # make test-nofuse (MPCC_NO_FUSE=1) runs mlp_adam alone of these: the
    # others differ from it in the runtime's optimizer and schedule only,
    # which fusion does not change, and make test ran them
    [ "${MPCC_NO_FUSE:-}" = 1 ] && [ $v != mlp_adam ] && [ -z "${CASES:-}" ] && continue
    run_case "$v" "$W/$v.mp" float32 40 1e-4 "$MNIST" "$MNIST_E"
done
# RMSprop with every option against torch.optim.RMSprop in float32, 1e-6 a step
run_case mlp_rmsprop_all_torch32 "$W/mlp_rmsprop_all.mp" float32 25 1e-6 "$MNIST" "$MNIST_E"
run_case mlp_adam_f16 "$W/mlp_adam.mp" mixed_float16 40 3e-2 "$MNIST" "$MNIST_E"
# the same against a twin that rounds as the plan does (models.py, lowp):
# f16 1e-4, bf16 1e-3 (its coarser rounding flips more often with the
# order of f32 sums)
run_case mlp_adam_f16_emulated "$W/mlp_adam.mp" mixed_float16 40 1e-4 "$MNIST" "$MNIST_E"
run_case mlp_adam_bf16_emulated "$W/mlp_adam.mp" mixed_bfloat16 40 1e-3 "$MNIST" "$MNIST_E"
run_case example_mnist_mlp_f16_emulated examples/mnist_mlp.mp mixed_float16 30 1e-4 "$MNIST" "$MNIST_E"
run_case metric_alias tests/models/metric_alias.mp float32 20 1e-4 "$MNIST" "$MNIST_E"
# buffers: loaded by --init, used in expressions, saved unchanged
run_case mlp_buffer tests/models/mlp_buffer.mp float32 30 1e-4 "$MNIST" "$MNIST_E"
# mixed_bfloat16 (8-bit mantissas): against torch float32 within 5%
run_case mlp_adam_bf16 "$W/mlp_adam.mp" mixed_bfloat16 40 5e-2 "$MNIST" "$MNIST_E"
run_case char_tf_bf16 tests/models/char_tf.mp mixed_bfloat16 30 5e-2 "$SHAKE" "$SHAKE_E"
# for loops with a shared cell, select, stack, blocks of two values, name = "",
# a block shadowing gelu, const // % log exp sqrt (the front end's additions)
run_case rnn_loop tests/models/rnn_loop.mp float32 40 1e-4 x=digits_x,label=digits_y x=digits_ex,label=digits_ey
run_case rnn_loop_f16 tests/models/rnn_loop.mp mixed_float16 40 3e-2 x=digits_x,label=digits_y x=digits_ex,label=digits_ey
# a Mixtral-style MoE block: topk, one_hot, gather, cumsum (routing and
# indexing); float32 also against torch in float32 within 1e-6 (_torch32)
for prec in float32 mixed_float16 mixed_bfloat16; do
    tol=1e-4; [ $prec = float32 ] || tol=3e-2
    run_case "moe_$prec" tests/models/moe.mp $prec 25 $tol x=digits_x,label=digits_y x=digits_ex,label=digits_ey
done
run_case moe_torch32 tests/models/moe.mp float32 25 1e-6 x=digits_x,label=digits_y x=digits_ex,label=digits_ey
# segmentation's layout: cross_entropy(logits [B, C, H, W], labels [B, H, W], axis = 1)
run_case seg_float32 tests/models/seg.mp float32 25 1e-4 x=digits_x,label=digits_y x=digits_ex,label=digits_ey
run_case seg_mixed_float16 tests/models/seg.mp mixed_float16 25 3e-2 x=digits_x,label=digits_y x=digits_ex,label=digits_ey

# examples/mnist_cnn.mp (Adam 2e-3 after batch_norm) is chaotic: torch's own
# float32 and float64 runs part by more than 1e-4 after ~20 steps, so it is
# compared over 10.
for prec in float32 mixed_float16; do
    tol=1e-4; [ $prec = float32 ] || tol=3e-2
    run_case "zoo_$prec"     tests/models/zoo.mp     $prec 40 $tol "$DIGITS" "$DIGITS_E"
    run_case "zoo2_$prec"    tests/models/zoo2.mp    $prec 40 $tol x=digits_x,label=digits_y x=digits_ex,label=digits_ey
    run_case "zoo3_$prec"    tests/models/zoo3.mp    $prec 40 $tol x=digits_x,label=digits_y x=digits_ex,label=digits_ey
    run_case "cnn_bn_$prec"  tests/models/cnn_bn.mp  $prec 30 $tol "$MNIST"  "$MNIST_E"
    run_case "mbconv_$prec"  tests/models/mbconv.mp  $prec 20 $tol "$MNIST"  "$MNIST_E"
    run_case "char_tf_$prec" tests/models/char_tf.mp $prec 30 $tol "$SHAKE"  "$SHAKE_E"
    run_case "gpt_split_$prec" tests/models/gpt_split.mp $prec 30 $tol "$SHAKE" "$SHAKE_E"
    run_case "example_mnist_mlp_$prec" examples/mnist_mlp.mp $prec 30 $tol "$MNIST" "$MNIST_E"
    run_case "example_mnist_cnn_$prec" examples/mnist_cnn.mp $prec 10 $tol \
        image=mnist_x4,label=mnist_y image=mnist_ex4,label=mnist_ey
    run_case "example_digits_mlp_$prec" examples/digits_mlp.mp $prec 40 $tol \
        pixels=digits_x,label=digits_y pixels=digits_ex,label=digits_ey
    run_case "example_char_transformer_$prec" examples/char_transformer.mp $prec 30 $tol "$SHAKEV" "$SHAKEV_E"
    # the GRU's per-step losses within 1e-6 of torch's float64 in float32
    run_case "example_char_gru_$prec" examples/char_gru.mp $prec 30 "$([ $prec = float32 ] && echo 1e-6 || echo $tol)" \
        "$SHAKEV" "$SHAKEV_E"
done
# every example has a case above, or in t_arch.sh (the real architectures),
# or a PyTorch twin in another test that says so ("# PyTorch twin of
# examples/vae.mp: ..." in t_random.sh: its noise must be fed to torch)
for m in examples/*.mp; do
    grep -q "run_case \"example_$(basename "$m" .mp)_" "$0" ||
        grep -q "^add $(basename "$m" .mp)_float32 " tests/t_arch.sh ||
        grep -q "^# PyTorch twin of $m: " tests/t_*.sh || fails+=("$m: no case in $0 or t_arch.sh")
done

[ ${#cases[@]} -gt 0 ] || { echo "FAIL no case matches CASES=${CASES:-}"; exit 1; }

# 1. every twin's initial parameters, in one Python process
: >"$W/init.batch"
for c in "${cases[@]}"; do
    IFS='|' read -r name model _ <<<"$c"
    echo "init $model $W/$name.init.safetensors" >>"$W/init.batch"
done
$PY tests/py/ref.py batch "$W/init.batch" || exit 1

# 2. build and run the trainers, two at a time
for c in "${cases[@]}"; do
    IFS='|' read -r name model prec steps tol data ev <<<"$c"
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n; done
    train_case "$name" "$model" "$prec" "$steps" "$data" "$ev" &
done
wait

# 3. the same training in PyTorch and the comparisons, in one process
: >"$W/check.batch"
for c in "${cases[@]}"; do
    IFS='|' read -r name model prec steps tol data ev <<<"$c"
    out=$W/$name
    if [ -e "$out.fail" ]; then
        fails+=("$name: $(head -n 1 "$out.fail")"); sed 's/^/    /' "$out.fail"; continue
    fi
    cmp="--tol $tol --dtype float64"      # float32: 1e-4 of the exact (float64) run
    # _torch32: float32 against torch in float32 (the same roundings)
    [[ $name == *_torch32 ]] && cmp="--tol $tol --dtype float32"
    # mixed: torch float32; the losses must also differ from it by more than
    # float32 rounding (2e-6), or the low precision type was not used
    [ "$prec" = float32 ] || cmp="--tol $tol --ptol 0 --etol $tol --min-diff 2e-6"
    # emulated: the twin rounds to the lowp type where the plan does
    [[ $name == *_emulated ]] && cmp="--tol $tol --ptol 2e-2 --etol $tol --emulate $(
        [ "$prec" = mixed_float16 ] && echo f16 || echo bf16)"
    echo "check $model $(case_args "$data" "$ev") --steps $steps --init $out.init.safetensors" \
         "--log $out.log.jsonl --ckpt $out.out.safetensors $cmp --report $out.ref.out" >>"$W/check.batch"
done
$PY tests/py/ref.py batch "$W/check.batch" || fails+=("some cases differ from PyTorch (above)")

# 4. negative controls: a trainer run checked against the twin of a train
# block it was NOT given must fail on its per-step losses or lr (tensors and
# evaluation not compared), or the cases above could not catch the feature
# being ignored. "RUN|WRONG MODEL" pairs:
controls=("mlp_nodecay_vectors|$W/mlp_decay_vectors.mp" "mlp_nodecay_glob|$W/mlp_decay_glob.mp"
          "mlp_nanogpt_warmup|$W/mlp_cosine_warmup.mp")
: >"$W/control.batch"
ncontrols=0
for c in "${controls[@]}"; do
    name=${c%%|*} out=$W/${c%%|*}
    [[ " ${cases[*]} " == *" $name|"* ]] && [ ! -e "$out.fail" ] || continue
    echo "check ${c#*|} $(case_args "$MNIST" "") --steps 40 --init $out.init.safetensors --log $out.log.jsonl" \
         "--ckpt $out.out.safetensors --tol 1e-4 --ptol 0 --dtype float64 --report $out.control.out" >>"$W/control.batch"
    ncontrols=$((ncontrols + 1))
done
if [ "$ncontrols" -gt 0 ]; then
    $PY tests/py/ref.py batch "$W/control.batch" >"$W/control.out"
    sed 's/^/    /' "$W/control.out"
    got=$(grep -c '^FAIL ' "$W/control.out")
    [ "$got" -eq "$ncontrols" ] && echo "negative controls: all $ncontrols told apart from the wrong train block" ||
        fails+=("only $got of $ncontrols negative controls differ from the wrong train block's twin")
fi

echo
if [ ${#fails[@]} -gt 0 ]; then
    printf 'FAIL %s\n' "${fails[@]}"
    exit 1
fi
echo "all cases agree with PyTorch"
