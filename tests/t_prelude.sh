#!/usr/bin/env bash
# t_prelude.sh - the prelude (compiler/prelude.mp: operations written in the
# language, parsed before every model):
#   1. tests/models/prelude_ops.mp (every prelude block; cross_entropy and
#      mse with reduction = "sum") against torch.nn.functional in float32
#      (tests/py/prelude_twin.py): the loss and every parameter's gradient
#      after one SGD step with lr = 1; it also builds under mixed_float16;
#   2. each elementwise block and each loss is one loop: in the plan of a
#      model calling it once, the forward nodes of its line (but constants
#      and the loss's reduction) are one fusion group, and so are the
#      backward nodes of its line; with --no-fuse each node is a kernel of
#      its own (the count the group replaces);
#   3. a model's block of a prelude name is used instead, with a note, and
#      a block whose default values follow a required parameter is fine
#      while a required one after a default is an error;
#   4. a prelude block called wrongly is reported at the model's call
#      (file:line:col of the call, "(in 'softplus', a block of the prelude)"),
#      once, and never at compiler/prelude.mp.
# The gradients against finite differences: tests/gradcheck/gc_prelude.mp
# (t_gradcheck.sh).
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

echo "== 1. prelude_ops.mp against torch.nn.functional"
$PY tests/py/prelude_twin.py init "$tmp" &&
    build_trainer tests/models/prelude_ops.mp "$tmp/p" --precision float32 &&
    "$tmp/p" --data x="$tmp/x.npy" --data t="$tmp/t.npy" --data y="$tmp/y.npy" \
        --init "$tmp/init.safetensors" --no-shuffle --steps 1 --log-every 1 \
        --log "$tmp/run.jsonl" --save "$tmp/run.safetensors" >"$tmp/run.out" 2>&1 &&
    $PY tests/py/prelude_twin.py check "$tmp" || bad "prelude_ops.mp against PyTorch"
build_trainer tests/models/prelude_ops.mp "$tmp/p16" --precision mixed_float16 -- -O0 ||
    bad "prelude_ops.mp does not build under mixed_float16"

echo "== 2. one loop per prelude operation"
one_loop() {   # one_loop CALL: `y = CALL` on [64, 256] f32 values h and t
    cat >"$tmp/f.mp" <<MP
model f
input x: f32[64, 256]
input t: f32[64, 256]
param w: [64, 256] = ones()
h = x * w
y = $1
loss = sum(y)
train {
  optimizer = sgd(lr = 0.1)
  minimize loss
}
MP
    "$MPCC" "$tmp/f.mp" --precision float32 --fuse --dump-plan=json >"$tmp/f.json" &&
        "$MPCC" "$tmp/f.mp" --precision float32 --no-fuse --dump-plan=json >"$tmp/f0.json" &&
        $PY - "$tmp/f.json" "$tmp/f0.json" "$1" <<'PY'
import json, sys
fused, unfused, call = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
skip = {"const", "sum", "mean", "reduce_grad", "loss_scale"}
def mine(plan, phase):
    return [n for n in plan["nodes"] if n["line"] == 6 and n["phase"] == phase and n["op"] not in skip]
ok = True
for phase in ("forward", "backward"):
    nodes = mine(fused, phase)
    groups = {n.get("fused") for n in nodes}
    kernels = len(mine(unfused, phase))
    if len(nodes) == 1:
        print(f"  {call:60s} {phase:8s}: 1 kernel ({nodes[0]['op']})")
    elif len(groups) != 1 or None in groups or 0 in groups:
        print(f"FAIL {call}: {phase} nodes in groups {sorted(map(str, groups))}, not one loop")
        ok = False
    else:
        print(f"  {call:60s} {phase:8s}: 1 loop for {kernels} kernels")
sys.exit(0 if ok else 1)
PY
}
for call in "relu6(h)" "hardsigmoid(h)" "hardswish(h)" "leaky_relu(h, 0.2)" "elu(h)" \
    "softplus(h)" "softplus(h, beta = 2, threshold = 3)" "log_sigmoid(h)" \
    "binary_cross_entropy(sigmoid(h), t)" "binary_cross_entropy_with_logits(h, t)" \
    "binary_cross_entropy_with_logits(h, t, pos_weight = 3, reduction = \"sum\")" \
    "l1_loss(h, t)" "smooth_l1_loss(h, t, beta = 0.5)" "huber_loss(h, t, reduction = \"sum\")"; do
    one_loop "$call" || fail=1
done

echo "== 3. a model's own block shadows the prelude's"
cat >"$tmp/s.mp" <<'MP'
model s
input x: f32[4, 8]
param w: [8] = ones()
block elu(x, scale = 2) {
  return relu(x) * scale
}
loss = sum(elu(x * w))
train {
  optimizer = sgd(lr = 0.1)
  minimize loss
}
MP
"$MPCC" "$tmp/s.mp" --dump-plan >"$tmp/s.plan" 2>"$tmp/s.err" || bad "a block named elu does not compile"
grep -q "s.mp:4:7: note: block 'elu' shadows the built-in operation 'elu'" "$tmp/s.err" ||
    bad "no note for the block that shadows the prelude's elu"
grep -q " relu " "$tmp/s.plan" && ! grep -q "\[elu\]\| exp " "$tmp/s.plan" ||
    bad "the prelude's elu ran instead of the model's"
for name in $(sed -nE 's/^block ([a-z0-9_]+)\(.*/\1/p' compiler/prelude.mp); do   # every one
    printf 'model s\ninput x: f32[4, 8]\nparam w: [8] = ones()\nblock %s(a, b = 1) {\n  return relu(a) * b\n}\nloss = sum(%s(x * w))\ntrain {\n  optimizer = sgd(lr = 0.1)\n  minimize loss\n}\n' \
        "$name" "$name" >"$tmp/s2.mp"
    "$MPCC" "$tmp/s2.mp" --dump-plan=json >"$tmp/s2.json" 2>"$tmp/s2.err" &&
        grep -q "note: block '$name' shadows the built-in operation '$name'" "$tmp/s2.err" &&
        ! grep -q '"op": "\(exp\|log\|clamp\|abs\|minimum\|maximum\|div\)"' "$tmp/s2.json" ||
        bad "a model's block named $name is not the one used"
done
printf 'model d\ninput x: f32[4]\nblock f(x, a = 1, b) {\n  return x * a * b\n}\n' >"$tmp/d.mp"
"$MPCC" "$tmp/d.mp" 2>"$tmp/d.err"
grep -q "d.mp:3:19: error: parameter 'b' needs a default value" "$tmp/d.err" ||
    { bad "a required parameter after a default one"; cat "$tmp/d.err"; }

echo "== 4. messages about a prelude block point at the model's call"
cat >"$tmp/e.mp" <<'MP'
model e
input x: f32[4, 8]
param w: [8] = ones()
a = softplus(x * w, beta = [1, 2])
b = l1_loss(x * w, x, reduction = "avg")
c = logsumexp(x * w, 5)
d = leaky_relu(x, slope = 0.1, foo = 2)
loss = sum(a) + b + sum(c) + sum(d)
train {
  optimizer = sgd(lr = 0.1)
  minimize loss
}
MP
"$MPCC" "$tmp/e.mp" 2>"$tmp/e.err" && bad "wrong prelude calls compile"
for want in "e.mp:4:5: error: .* (in 'softplus', a block of the prelude)" \
    'e.mp:5:35: error: reduction must be "mean" or "sum", got "avg"' \
    "e.mp:6:5: error: .* (in 'logsumexp', a block of the prelude)" \
    "e.mp:7:32: error: unknown argument 'foo' of leaky_relu(x, slope)"; do
    grep -q "$want" "$tmp/e.err" || bad "no message '$want'"
done
[ "$(grep -c "e.mp:4:5: error" "$tmp/e.err")" = 1 ] || bad "softplus's wrong call reported more than once"
! grep -q "prelude.mp" "$tmp/e.err" || bad "a message points into compiler/prelude.mp"
[ $fail = 0 ] && echo "PASS" || { cat "$tmp/e.err"; exit 1; }
