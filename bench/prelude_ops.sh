#!/usr/bin/env bash
# prelude_ops.sh - a prelude block (compiler/prelude.mp, one fused loop)
# against a dedicated elementwise kernel, in the generated C trainer. Not
# part of `make test` (t_prelude.sh checks the loop counts, not speed).
#
#   bench/prelude_ops.sh        STEPS=300 REPEAT=3 THREADS=1 by default
#
# Each model is `y = OP(x * w)` on [256, 4096] f32 values, the loss
# mean(y * t), float32, SGD: a step is the op forward and backward plus the
# same few passes around it, so the step times compare the op. The
# reference kernels are relu (the cheapest) and sigmoid / silu / gelu (an
# exp or erf per element, each one kernel forward and one backward). Prints
# a Markdown table of milliseconds per step, best of REPEAT runs (the
# machine may be shared).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
STEPS=${STEPS:-300}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-1}
W=build/bench/prelude
mkdir -p "$W"
export OMP_NUM_THREADS=$THREADS
$PY -c "
import numpy as np
r = np.random.default_rng(0)
np.save('$W/x.npy', (r.standard_normal((1024, 4096)) * 3).astype(np.float32))
np.save('$W/t.npy', r.uniform(0, 1, (1024, 4096)).astype(np.float32))"
ops=("relu(h)" "sigmoid(h)" "silu(h)" "gelu(h)" "relu6(h)" "hardswish(h)" "leaky_relu(h)" "elu(h)"
     "softplus(h)" "log_sigmoid(h)")
echo "| y = | kind | ms / step |"
echo "| --- | --- | --- |"
for op in "${ops[@]}"; do
    cat >"$W/m.mp" <<MP
model m
input x: f32[256, 4096]
input t: f32[256, 4096]
param w: [4096] = ones()
y = $op
loss = mean(y * t)
train {
  optimizer = sgd(lr = 0.01)
  precision = float32
  minimize loss
}
MP
    sed -i "s/^y = \(.*\)(h)/h = x * w\ny = \1(h)/" "$W/m.mp"
    build_trainer "$W/m.mp" "$W/m" -- -O3 -march=native -fopenmp >/dev/null
    best=""
    for _ in $(seq "$REPEAT"); do
        s=$( { /usr/bin/time -f %e "$W/m" --data x="$W/x.npy" --data t="$W/t.npy" --steps "$STEPS" \
              --log-every 100000 >/dev/null; } 2>&1 | tail -1)
        best=$($PY -c "print(min(float(v) for v in '$best $s'.split()))")
    done
    kind=kernel
    grep -q "^block ${op%%(*}(" compiler/prelude.mp && kind=prelude
    echo "| \`$op\` | $kind | $($PY -c "print(f'{1000 * $best / $STEPS:.2f}')") |"
done
