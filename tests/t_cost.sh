#!/usr/bin/env bash
# t_cost.sh - `mpcc --dump-plan=cost --gpu NAME` and `--dump-plan=cost-json`
# (PRECISION.md, "Additions: the cost of a step, before running it";
# compiler/cost.c):
#   1. tests/cost/cost_ops.mp: the FLOPs of a linear (with bias), a matmul,
#      a conv2d (stride 2, padding 1, bias), a cross attention (T 10,
#      T' 7) and a causal one (55 of 100 pairs), forward and backward (the
#      weight and input gradients, attention_grad), each equal to its hand
#      formula; the bytes of the linear as its inputs and output at their
#      storage types;
#   2. GPT-2 small (examples/gpt2.mp at V 50304, T 1024, D 768, H 12, L 12,
#      B 8): the products' FLOPs are exactly 6 N tokens + 12 L B H P (D / H)
#      + the linears' bias adds (N the product weights: 12 L D^2 + V D; P
#      the causal pairs of T), and the whole step within 1% of 6 N tokens
#      + attention; under mixed_bfloat16 its products run at the bf16
#      Tensor Core rate; the predicted time is the sum of the ops', the
#      ten costliest ops' share and MFU follow from the ops; h200 (more
#      bandwidth) predicts less time than h100, a100 and l4 more;
#   3. the json is well-formed (Python's json) for every device, the text
#      has its rows and summary; usage errors (no --gpu, an unknown device,
#      --gpu without the cost format) exit 2 with one line.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

echo "== 1. FLOPs of each product against its hand formula"
"$MPCC" tests/cost/cost_ops.mp --dump-plan=cost-json --gpu h100 >"$tmp/ops.json" 2>"$tmp/ops.err" ||
    { bad "cost-json of cost_ops.mp: exit $?: $(head -n 3 "$tmp/ops.err")"; exit 1; }
$PY - "$tmp/ops.json" <<'EOF' || fail=1
import json, sys
ops = json.load(open(sys.argv[1]))["ops"]
bad = 0
def rows(op, phase):
    return [o for o in ops if o["op"] == op and o["phase"] == phase]
def want(what, got, exp, unit="FLOPs"):
    global bad
    ok = got == exp
    print(("ok   " if ok else "FAIL: ") + "%s: %s %s, hand formula %s" % (what, got, unit, exp))
    bad |= not ok
causal = sum(min(i + 1, 10) for i in range(10))          # 55 pairs
want("linear [2, 64] -> 32, bias", [o["flops"] for o in rows("linear", "forward")], [2 * 2 * 64 * 32 + 2 * 32])
want("matmul [2, 32] @ [32, 16]", [o["flops"] for o in rows("matmul", "forward")], [2 * 2 * 32 * 16])
want("conv2d [2, 3, 9, 9] -> 5 x 3x3 / 2, bias",
     [o["flops"] for o in rows("conv2d", "forward")], [2 * (2 * 5 * 5 * 5) * 3 * 3 * 3 + 2 * 5 * 5 * 5])
want("attention cross T 10 T' 7 D 16, causal T 10",
     sorted(o["flops"] for o in rows("attention", "forward")),
     sorted([4 * 2 * 4 * 10 * 7 * 16, 4 * 2 * 4 * causal * 16]))
# backward: h @ w: dh = dy w^T (matmul), dw = h^T dy (matmul_tn); the
# linear's dw (matmul_tn, its input x needs no gradient); conv2d_dw; the
# cross attention's gradient (kk, vv are parameters; the causal one has none)
want("matmul backward (dh)", [o["flops"] for o in rows("matmul", "backward")], [2 * 2 * 16 * 32])
want("matmul_tn backward (dw of matmul, of linear)",
     sorted(o["flops"] for o in rows("matmul_tn", "backward")), sorted([2 * 32 * 16 * 2, 2 * 32 * 64 * 2]))
want("conv2d_dw", [o["flops"] for o in rows("conv2d_dw", "backward")], [2 * (2 * 5 * 5 * 5) * 3 * 3 * 3])
want("attention_grad cross", [o["flops"] for o in rows("attention_grad", "backward")], [8 * 2 * 4 * 10 * 7 * 16])
lin = rows("linear", "forward")[0]
want("linear bytes read (x, weight, bias in f32)", lin["bytes_read"], 4 * (2 * 64 + 32 * 64 + 32), "bytes")
want("linear bytes written", lin["bytes_written"], 4 * 2 * 32, "bytes")
sys.exit(bad)
EOF

echo "== 2. GPT-2 small: 6 N tokens + attention"
sed -e 's/^const B = 16 .*/const B = 8/' -e 's/^const T = 64 .*/const T = 1024/' \
    -e 's/^const V = 65 .*/const V = 50304/' -e 's/^const D = 128 .*/const D = 768/' \
    -e 's/^const H = 4 .*/const H = 12/' -e 's/^const L = 4 .*/const L = 12/' examples/gpt2.mp >"$tmp/gpt2s.mp"
[ "$(grep -c '^const [BTVDHL] = [0-9]*$' "$tmp/gpt2s.mp")" = 6 ] || bad "the GPT-2 small edit of examples/gpt2.mp did not apply"
for dev in h100 h200 a100 l4 cpu; do
    "$MPCC" "$tmp/gpt2s.mp" --dump-plan=cost-json --gpu $dev >"$tmp/g_$dev.json" 2>"$tmp/g.err" ||
        bad "cost-json --gpu $dev: exit $?: $(head -n 3 "$tmp/g.err")"
done
$PY - "$tmp" <<'EOF' || fail=1
import json, sys
d = sys.argv[1]
B, T, V, D, H, L = 8, 1024, 50304, 768, 12, 12
bad = 0
def check(ok, msg):
    global bad
    print(("ok   " if ok else "FAIL: ") + msg)
    bad |= not ok
g = {k: json.load(open("%s/g_%s.json" % (d, k))) for k in ("h100", "h200", "a100", "l4", "cpu")}
ops, step = g["h100"]["ops"], g["h100"]["step"]
tokens = B * T
N = 12 * L * D * D + V * D
pairs = T * (T + 1) // 2
att = 12 * L * B * H * pairs * (D // H)
prod = sum(o["runs"] * o["flops"] for o in ops if o["product"])
bias = 9 * D * L * tokens          # c_attn 3D, c_proj D, c_fc 4D, c_proj D outputs per token
expect = 6 * N * tokens + att + bias
check(prod == expect, "products' FLOPs %.6g = 6 N tokens + 12 L B H P d + bias adds %.6g (N %d)" % (prod, expect, N))
ratio = step["flops"] / (6 * N * tokens + att)
check(1 <= ratio < 1.01, "step FLOPs %.6g GFLOP = %.4f x (6 N tokens + attention)" % (step["flops"] / 1e9, ratio))
units = {o["compute"] for o in ops if o["product"]}
check(units == {"bf16"}, "mixed_bfloat16: every product at the bf16 rate (%s)" % sorted(units))
# attention on Tensor Cores: its time is its kernels' work (whole 64 x 64
# tiles, causal: those at or left of the diagonal; 4 D forward, 14 D
# backward a pair) at the bf16 rate, or its bytes, and a launch a kernel
tiles = sum(min(i0 + 64, T) // 64 for i0 in range(0, T, 64))
for op, per, launches in (("attention", 4, 1), ("attention_grad", 14, 1)):
    work = per * B * H * tiles * 64 * 64 * (D // H)
    rows = [o for o in ops if o["op"] == op]
    check(len(rows) == L and all(o["compute"] == "bf16" and abs(o["time_s"] - max(work / 989.4e12, (o["bytes_read"] + o["bytes_written"]) / 3350e9) - 2e-6 * o["launches"]) < 1e-9 for o in rows),
          "%s: %d ops, each max(its tiles' work %.4g FLOPs at 989.4 TFLOP/s, its bytes) + its launches" % (op, len(rows), work))
for k, v in g.items():
    s, o = v["step"], v["ops"]
    tsum = sum(x["time_s"] for x in o)
    top = sorted((x["time_s"] for x in o), reverse=True)[:10]
    mfu = s["flops"] / (s["peak_flops"] * s["time_s"])
    check(abs(tsum - s["time_s"]) <= 1e-4 * s["time_s"] and abs(sum(top) / s["time_s"] - s["top10_share"]) < 1e-4
          and abs(mfu - s["mfu"]) <= 1e-4 * mfu and 0 < s["mfu"] <= 1,
          "%s: step %.4g ms = the ops' sum, ten costliest %.1f%%, MFU %.1f%%"
          % (k, s["time_s"] * 1e3, 100 * s["top10_share"], 100 * s["mfu"]))
t = {k: v["step"]["time_s"] for k, v in g.items()}
check(t["h200"] < t["h100"] < t["a100"] < t["l4"], "step time h200 %.4g < h100 %.4g < a100 %.4g < l4 %.4g ms"
      % (t["h200"] * 1e3, t["h100"] * 1e3, t["a100"] * 1e3, t["l4"] * 1e3))
sys.exit(bad)
EOF

echo "== 3. the text report, usage errors"
"$MPCC" tests/cost/cost_ops.mp --dump-plan=cost --gpu a100 >"$tmp/ops.txt" 2>"$tmp/ops.err" || bad "cost text: exit $?"
for re in "^cost of one step of model 'cost_ops' on a100 \(NVIDIA A100" "^ +[0-9]+  attention_grad +backward" \
          "^predicted step time: [0-9.e+-]+ ms" "^the ten costliest ops: [0-9.]+% of the step time" "^MFU: [0-9.]+%"; do
    grep -Eq "$re" "$tmp/ops.txt" && echo "ok   text: /$re/" || bad "text report: no line /$re/"
done
usage() {   # usage REGEX ARGS...: exit 2 with that one line, no output
    local re=$1
    shift
    "$MPCC" tests/cost/cost_ops.mp "$@" >"$tmp/u.out" 2>"$tmp/u.err"
    local rc=$?
    [ $rc = 2 ] && [ "$(wc -l <"$tmp/u.err")" = 1 ] && grep -Eq -- "$re" "$tmp/u.err" && [ ! -s "$tmp/u.out" ] &&
        echo "ok   $*: $(cat "$tmp/u.err")" || bad "$*: exit $rc: $(head -n 3 "$tmp/u.err")"
}
usage "--dump-plan=cost needs --gpu NAME \(h100, h200, a100, l4 or cpu\)" --dump-plan=cost
usage "unknown device 'v100' for --gpu, expected h100, h200, a100, l4 or cpu" --dump-plan=cost-json --gpu v100
usage "--gpu only applies to --dump-plan=cost" --dump-plan --gpu h100
[ $fail = 0 ] && echo "PASS t_cost" || echo "FAIL t_cost"
exit $fail
