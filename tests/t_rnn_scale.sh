#!/usr/bin/env bash
# t_rnn_scale.sh - gru and lstm are flat in the sequence length T: a model of
# a two-layer gru, an lstm and their final states compiled at T = 16 and at
# T = 256 has the same operations in its plan (count and order: the compile
# work), and the same generated program (C and CUDA) up to the numbers in
# it (the sizes): each layer's steps are a loop that runs at run time, one
# product per step, not T copies of a cell. Measured as counts and bytes,
# never seconds; the figures are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

model() {   # model T FILE
    cat >"$2" <<EOF2
model rnn_scale
const B = 4
const T = $1
input tokens: i32[B, T]
input targets: i32[B, T]
x = embedding(tokens, 32, 16, name = "embed")
y, h = gru(x, 24, layers = 2, name = "rnn")
z, hl, cl = lstm(y, 24, name = "cell")
logits: f32 = linear(z, 32, name = "head")
loss = cross_entropy(logits, targets) + mean(h * h) + mean(cl * hl)

train {
  optimizer = adam(lr = 1e-3)
  minimize loss
}
EOF2
}

ops() {   # ops FILE: the plan's operations, one a line, in order
    "$MPCC" "$1" --dump-plan=json | /usr/bin/python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    print(n["phase"], n["op"])'
}

for T in 16 256; do
    model "$T" "$tmp/t$T.mp"
    ops "$tmp/t$T.mp" >"$tmp/t$T.ops" || { echo "FAIL: mpcc --dump-plan failed at T = $T"; exit 1; }
    for target in c cuda; do
        "$MPCC" "$tmp/t$T.mp" --target $target -o "$tmp/t$T.$target" ||
            { echo "FAIL: mpcc --target $target failed at T = $T"; exit 1; }
        sed 's/[0-9][0-9]*/N/g' "$tmp/t$T.$target" >"$tmp/t$T.$target.shape"
    done
done
n16=$(wc -l <"$tmp/t16.ops") n256=$(wc -l <"$tmp/t256.ops")
grep -q "forward gru" "$tmp/t16.ops" && grep -q "backward lstm_grad" "$tmp/t16.ops" ||
    { echo "FAIL: the plan has no gru / lstm_grad node"; fail=1; }
if cmp -s "$tmp/t16.ops" "$tmp/t256.ops"; then
    echo "ok   the plan: $n16 operations at T = 16 and $n256 at T = 256, the same ones"
else
    echo "FAIL: the plan grows with T: $n16 operations at T = 16, $n256 at T = 256"; fail=1
fi
for target in c cuda; do
    b16=$(wc -c <"$tmp/t16.$target") b256=$(wc -c <"$tmp/t256.$target")
    if cmp -s "$tmp/t16.$target.shape" "$tmp/t256.$target.shape"; then
        echo "ok   the $target program: $b16 bytes at T = 16, $b256 at T = 256, the same text up to its numbers"
    else
        echo "FAIL: the $target program grows with T: $b16 bytes at T = 16, $b256 at T = 256"
        diff "$tmp/t16.$target.shape" "$tmp/t256.$target.shape" | head -n 10
        fail=1
    fi
done
# the check can fail: the same model written as a cell unrolled by a for
# loop makes more operations at the larger T
cat >"$tmp/unrolled.mp" <<'EOF2'
model unrolled
const T = 4
input x: f32[2, T, 3]
param r: [2, 5] = normal(1)
h = zeros([2, 5])
for t in 0 .. T {
  h = tanh(linear(select(x, 1, t), 5, name = "inp") + linear(h, 5, name = "cell"))
}
loss = sum(h * r)
train {
  optimizer = sgd(lr = 0.1)
  minimize loss
}
EOF2
sed 's/^const T = 4$/const T = 8/' "$tmp/unrolled.mp" >"$tmp/unrolled8.mp"
if [ "$(ops "$tmp/unrolled.mp" | wc -l)" -lt "$(ops "$tmp/unrolled8.mp" | wc -l)" ]; then
    echo "ok   the check tells an unrolled cell apart (more operations at T = 8 than at T = 4)"
else
    echo "FAIL: the operation count does not tell an unrolled cell apart"; fail=1
fi
exit $fail
