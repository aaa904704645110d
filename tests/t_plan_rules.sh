#!/usr/bin/env bash
# t_plan_rules.sh - PRECISION.md's rules on real plans. Every model in
# examples/, tests/plan/ and tests/gradcheck/ is planned under each policy
# with ./mpcc --dump-plan=json and checked by tests/plan/check_plan.py (class
# of each op, casts one per value and type, inputs in the compute type,
# backward types, loss scaling, optimizer, summary); then each model is
# checked for what it is there to show. Under float32 and mixed_bfloat16
# each is also planned with --float32-matmul tf32. The dot form must be valid Graphviz
# when graphviz is installed (skipped, with a note, when it is not).
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
plan_extra=()

# plan MODEL POLICY|default [EXPECTATION...]: plan, check, report
plan() {
    local mp=$1 pol=$2
    shift 2
    local opt=("${plan_extra[@]}")   # plan_extra: more mpcc options (the tf32 pass below)
    [ "$pol" = default ] || opt+=(--precision "$pol")
    if ! "$MPCC" "$mp" "${opt[@]}" --dump-plan=json >"$tmp/plan.json" 2>"$tmp/err"; then
        echo "FAIL $mp ($pol): mpcc failed"
        head -n 20 "$tmp/err"
        fail=1
        return
    fi
    local out
    if out=$("$PY" tests/plan/check_plan.py "$@" <"$tmp/plan.json"); then
        echo "ok   $mp ($pol) $*"
    else
        echo "FAIL $mp ($pol)"
        echo "$out"
        fail=1
    fi
}

# warns MODEL TEXT [MPCC OPTION...]: compiling MODEL warns with TEXT
warns() {
    local mp=$1 text=$2
    shift 2
    if "$MPCC" "$mp" "$@" --dump-plan=json 2>&1 >/dev/null | grep -qF -- "$text"; then
        echo "ok   $mp $* warns: $text"
    else
        echo "FAIL $mp $* does not warn: $text"
        fail=1
    fi
}

# Every model under every policy: the general rules, and what each policy
# implies for models that write no f16/bf16 of their own and no loss_scale.
for mp in examples/*.mp tests/plan/*.mp tests/gradcheck/*.mp; do
    [ -L "$mp" ] && continue          # tests/plan/ links the examples for golden.sh
    own_lowp=0 own_ls=0
    grep -qE 'f16|bf16' "$mp" && own_lowp=1
    grep -qE '^[[:space:]]*loss_scale' "$mp" && own_ls=1
    for pol in float32 mixed_float16 mixed_bfloat16 mixed_float8; do
        want=()
        [ "$pol" = float32 ] && [ $own_lowp = 0 ] && want+=(nolowp)
        [ "$pol" = mixed_float16 ] && [ $own_ls = 0 ] && want+=(loss_scale=dynamic)
        [ "$pol" != mixed_float16 ] && [ $own_ls = 0 ] && want+=(loss_scale=none)
        plan "$mp" "$pol" "${want[@]}"
    done
    # float32_matmul tf32: compute tf32 on the f32 products of the GEMM and
    # nowhere else (check_plan.py check_tf32); t_tf32.sh tests the rest
    plan_extra=(--float32-matmul tf32)
    for pol in float32 mixed_bfloat16; do plan "$mp" "$pol"; done
    plan_extra=()
done

# What each model is there to show.
# Attention reads q, k, v and writes y and its gradients in the model's
# [B, T, H, D] layout (sema.c fold_attention_layouts): no transpose around
# it either way, and GPT-2's chunk into q, k, v gets its gradient with no
# slice and no concat (autodiff.c concat_is_reshape). What remains: GPT-2's
# chunks (3 a layer), the windows of its input (2), and separate q, k, v
# projections' gradient slices (3 an attention).
plan examples/gpt2.mp default count:forward.transpose=0 count:backward.transpose=0 \
    count:backward.slice=0 count:backward.concat=0 count:forward.chunk=12
plan examples/llama.mp default count:forward.transpose=0 count:backward.transpose=0 \
    count:backward.slice=12
plan examples/char_transformer.mp default count:backward.transpose=0 count:backward.slice=6
plan examples/mnist_mlp.mp default node:logits.type=f32 node:logits.rule=override \
    node:logits.class=fp32 node:h.compute=f16 node:h.class=follow node:x.compute=f32 \
    all:linear.compute=f16,f32 copies:h.weight=f16 copies:h.bias=f16 \
    copies:logits.weight=none copies:logits.bias=none loss_scale=dynamic
plan examples/mnist_mlp.mp mixed_bfloat16 copies:h.weight=bf16 node:h.compute=bf16 \
    node:logits.type=f32 loss_scale=dynamic      # as its train block writes
plan examples/mnist_mlp.mp float32 copies:h.weight=none nolowp
plan examples/mnist_cnn.mp default all:conv2d.compute=f16 all:batch_norm.compute=f32 \
    all:max_pool2d.compute=f32 all:cross_entropy.type=f32 node:logits.type=f32 \
    copies:conv1.weight=f16 copies:bn1.weight=none copies:fc.weight=none
plan examples/char_transformer.mp default all:embedding.compute=f16 \
    all:attention.compute=f16 all:layer_norm.compute=f32 all:gelu.compute=f16 \
    all:cross_entropy.compute=f32 node:logits.type=f32 copies:tok.weight=f16 \
    copies:pos=none copies:head.weight=none copies:layers.0.ln1.weight=none
plan examples/digits_mlp.mp default nolowp loss_scale=none
plan tests/plan/lists.mp default node:h.rule=list node:h.class=fp32 node:h.compute=f32 \
    node:p.rule=list node:p.class=lowp node:p.compute=f16 node:e.compute=f16 \
    node:logits.rule=override node:logits.compute=f32
warns tests/plan/lists.mp "lists.mp:9:10: warning: 'softmax' computes in f16 because of fp16_ops"
warns tests/plan/lists.mp "lists.mp:10:10: warning: 'exp' computes in f16 because of fp16_ops"
warns tests/plan/lists.mp "warning: fp16_ops has no effect under precision float32" --precision float32
plan tests/plan/regions.mp default node:g.rule=override node:g.compute=f32 \
    all:tanh.rule=override node:h.compute=f16 node:s.compute=f16 node:s.rule=override \
    copies:g.weight=none copies:h.weight=f16 copies:y.weight=f16
warns tests/plan/regions.mp "regions.mp:13:10: warning: 'mean' computes in f16"
plan tests/plan/shared_weight.mp default node:a.compute=bf16 node:b.compute=f32 \
    node:c.compute=bf16 copies:w=bf16 loss_scale=none

# mixed_float8 (PRECISION.md "Additions: TF32 and FP8"; check_plan.py's
# check_fp8 holds the general rules): the MLP's hidden linear is quantised,
# its weight read as the f32 master (no bf16 copy), the f32 logits are not;
# the activations kept are mixed_bfloat16's (599556 bytes) with x's bf16
# copy (2 bytes an element) traded for its e4m3 copy (1 byte): 128 x 784
# fewer.
plan examples/mnist_mlp.mp mixed_float8 copies:h.weight=none copies:h.bias=bf16 \
    node:logits.compute=f32 all:linear.compute=e4m3,f32 fp8:recipe=delayed fp8:amax_history=16 \
    fp8:margin=0 fp8:slots=3 summary:fp8_products=2 summary:fp8_forward=1 \
    summary:activation_bytes=$((599556 - 128 * 784))
# (4 forward products; backward: h.weight 1, a 2, the a @ aᵀ 2, q 2; 11 slots:
# a @ aᵀ reads one value for both operands, the transpose being its flag, so
# one e4m3 slot quantises it for both)
plan tests/plan/fp8.mp default node:a.compute=e4m3 node:a.rule=class node:q.compute=e4m3 \
    node:q.rule=list node:g.compute=bf16 node:y.compute=f32 all:linear.compute=bf16,e4m3,f32 \
    copies:w=none copies:h.weight=none copies:g.weight=bf16 fp8:recipe=delayed \
    fp8:amax_history=4 fp8:margin=1 fp8:slots=11 summary:fp8_products=11 summary:fp8_state_bytes=220
sed 's/delayed(amax_history = 4, margin = 1)/current(margin = 2)/' tests/plan/fp8.mp >"$tmp/fp8_current.mp"
plan "$tmp/fp8_current.mp" default fp8:recipe=current fp8:amax_history=1 fp8:margin=2 \
    fp8:slots=11 summary:fp8_state_bytes=88
sed 's/fp8_ops   = \[matmul\]//' tests/plan/fp8.mp >"$tmp/fp8_nolist.mp"
plan "$tmp/fp8_nolist.mp" default node:a.compute=e4m3 node:q.compute=bf16 node:q.rule=class \
    fp8:slots=6 summary:fp8_products=5
# under a memory budget a dw product may read a recomputed x: with x's slot
if "$MPCC" examples/gpt2.mp --precision mixed_float8 --memory-budget 30MiB --dump-plan=json >"$tmp/plan.json" \
        2>"$tmp/err" && grep -q '"recomputes"' "$tmp/plan.json" &&
    out=$("$PY" tests/plan/check_plan.py <"$tmp/plan.json"); then
    echo "ok   examples/gpt2.mp (mixed_float8, --memory-budget 30MiB): recomputed operands"
else
    echo "FAIL examples/gpt2.mp (mixed_float8, --memory-budget 30MiB): $(head -n 3 "$tmp/err") ${out:-}"
    fail=1
fi
warns tests/plan/fp8.mp "warning: fp8 has no effect under precision mixed_bfloat16" --precision mixed_bfloat16
# Both programs quantise (t_fp8_train.sh trains the C one, t_cuda_emu.sh
# section 11 runs the CUDA one against it): each product's scales are
# used, and the CUDA program takes the amax of each of its 11 slots (a @
# transpose(a): one quantised copy for both operands); a
# mixed_float8 model with no quantised product is mixed_bfloat16's program.
if "$MPCC" tests/plan/fp8.mp -o "$tmp/fp8.cu" 2>"$tmp/err" && [ ! -s "$tmp/err" ] &&
    "$MPCC" tests/plan/fp8.mp --target c -o "$tmp/fp8.c" && grep -q 'mp_fp8_use(&mp_fp8, 1, 2);' "$tmp/fp8.c" &&
    [ "$(grep -c '^    mp_cu_fp8_observe<' "$tmp/fp8.cu")" = 11 ] &&
    grep -q 'mp_cu_matmul<MP_BF16, MP_BF16, MP_BF16>([a-z0-9_]*, mp_q0, mp_q0, ' "$tmp/fp8.cu"; then
    echo "ok   tests/plan/fp8.mp: C and CUDA programs that quantise (11 slots observed; a @ transpose(a) reads one copy)"
else
    echo "FAIL tests/plan/fp8.mp: the programs' quantised products: $(cat "$tmp/err")"
    fail=1
fi
if "$MPCC" examples/mnist_cnn.mp --precision mixed_float8 --target c -o "$tmp/cnn.c" 2>"$tmp/err" &&
    "$MPCC" examples/mnist_cnn.mp --precision mixed_bfloat16 --target c -o "$tmp/cnn_bf16.c" 2>>"$tmp/err" &&
    cmp -s <(grep -v mixed_ "$tmp/cnn.c") <(grep -v mixed_ "$tmp/cnn_bf16.c"); then
    echo "ok   examples/mnist_cnn.mp: mixed_float8 with no quantised product is mixed_bfloat16's program"
else
    echo "FAIL examples/mnist_cnn.mp under mixed_float8: $(head -n 3 "$tmp/err")"
    fail=1
fi

# The dot form is valid Graphviz: parsed (nop) for every example, laid out
# (dot -Tsvg) for the small ones -- the transformer's layout takes seconds.
if command -v dot >/dev/null && command -v nop >/dev/null; then
    for mp in examples/*.mp; do
        "$MPCC" "$mp" --dump-plan=dot >"$tmp/plan.dot" 2>/dev/null
        ok=1
        nop "$tmp/plan.dot" >/dev/null 2>"$tmp/dot.err" || ok=0
        case $mp in
            *mnist_mlp.mp | *mnist_cnn.mp) dot -Tsvg "$tmp/plan.dot" >/dev/null 2>>"$tmp/dot.err" || ok=0 ;;
        esac
        if [ $ok = 1 ] && [ ! -s "$tmp/dot.err" ]; then
            echo "ok   $mp: valid dot"
        else
            echo "FAIL $mp: invalid dot"
            head -n 5 "$tmp/dot.err"
            fail=1
        fi
    done
else
    echo "note: graphviz is not installed; the dot form is checked by test_plan only"
fi
exit $fail
