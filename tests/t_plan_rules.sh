#!/usr/bin/env bash
# t_plan_rules.sh - PRECISION.md's rules on real plans. Every model in
# examples/, tests/plan/ and tests/gradcheck/ is planned under each policy
# with ./mpcc --dump-plan=json and checked by tests/plan/check_plan.py (class
# of each op, casts one per value and type, inputs in the compute type,
# backward types, loss scaling, optimizer, summary); then each model is
# checked for what it is there to show. The dot form must be valid Graphviz
# when graphviz is installed (skipped, with a note, when it is not).
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# plan MODEL POLICY|default [EXPECTATION...]: plan, check, report
plan() {
    local mp=$1 pol=$2
    shift 2
    local opt=()
    [ "$pol" = default ] || opt=(--precision "$pol")
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
    for pol in float32 mixed_float16 mixed_bfloat16; do
        want=()
        [ "$pol" = float32 ] && [ $own_lowp = 0 ] && want+=(nolowp)
        [ "$pol" = mixed_float16 ] && [ $own_ls = 0 ] && want+=(loss_scale=dynamic)
        [ "$pol" != mixed_float16 ] && [ $own_ls = 0 ] && want+=(loss_scale=none)
        plan "$mp" "$pol" "${want[@]}"
    done
done

# What each model is there to show.
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
