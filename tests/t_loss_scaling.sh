#!/usr/bin/env bash
# t_loss_scaling.sh - dynamic loss scaling in the generated C trainer
# (PRECISION.md, "Loss scaling"):
#  1. ls_overflow.mp starts at S = 2^40: f16 gradients overflow, so the
#     first steps are skipped and counted, S halves each time, and the
#     master weights and optimizer state stay bitwise what they were.
#  2. The same model over 200 steps: the logged loss scale follows the
#     rules (backoff on a skip, growth after `interval` good steps), and
#     training converges all the same.
#  3. ls_hopeless.mp overflows even at S = 1: the trainer stops with exit 1
#     and one error naming the parameters, the operation and its line, for
#     static(1) and for a dynamic scale that has to back off to 1 first.
#  4. fwd_overflow.mp with --check-numerics: exit 1 naming `linear` and the
#     line of the forward op that overflowed f16.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=${B:-build}/t_loss_scaling
mkdir -p "$W"
mnist_first train 4096 "$W/x.npy" "$W/y.npy" && mnist_first t10k 1024 "$W/ex.npy" "$W/ey.npy" || exit 1
DATA=(--data image="$W/x.npy" --data label="$W/y.npy")
fail=0
bad() { echo "FAIL: $*"; fail=1; }

echo "== 1. skipped steps leave the weights alone"
build_trainer tests/models/ls_overflow.mp "$W/ovf" || exit 1
$PY tests/py/ref.py init tests/models/ls_overflow.mp "$W/init.safetensors" || exit 1
rm -f "$W/s5.jsonl"
"$W/ovf" "${DATA[@]}" --steps 5 --no-shuffle --init "$W/init.safetensors" --log "$W/s5.jsonl" \
    --log-every 1 --save "$W/s5.safetensors" >"$W/s5.out" 2>&1 || { tail -n 3 "$W/s5.out"; bad "5-step run failed"; }
$PY - "$W/init.safetensors" "$W/s5.safetensors" "$W/s5.jsonl" <<'PYEOF' || fail=1
import json, sys
sys.path.insert(0, "tests/py")
import st
init = st.read(sys.argv[1])
ck, meta = st.read(sys.argv[2], with_meta=True)
log = [json.loads(l) for l in open(sys.argv[3]) if l.strip() and '"eval"' not in l]
errs = []
for k, v in init.items():
    if ck[k].tobytes() != v.tobytes():
        errs.append(f"{k} changed although every step was skipped")
for k, v in ck.items():
    if k.startswith("optimizer.") and v.any():
        errs.append(f"{k} is not all zero although no step was taken")
for i, o in enumerate(log, 1):
    want = 2.0 ** 40 * 0.5 ** i
    print(f"  step {o['step']}: skipped {o['skipped']}, loss_scale {o['loss_scale']:g}")
    if o["skipped"] != i:
        errs.append(f"step {i}: skipped {o['skipped']}, expected {i}")
    if o["loss_scale"] not in (want, want * 2):
        errs.append(f"step {i}: loss_scale {o['loss_scale']}, expected 2^{40 - i} (after) or 2^{41 - i} (before the step)")
if len(log) != 5:
    errs.append(f"{len(log)} steps logged, expected 5")
if float(meta.get("loss_scale", -1)) != 2.0 ** 35:
    errs.append(f"checkpoint loss_scale {meta.get('loss_scale')!r}, expected 2^35 = {2.0 ** 35:.0f}")
if str(meta.get("skipped_steps", meta.get("skipped"))) != "5":
    errs.append(f"checkpoint skipped_steps {meta.get('skipped_steps')!r}, expected 5")
for e in errs:
    print("FAIL:", e)
sys.exit(1 if errs else 0)
PYEOF

echo "== 2. the scale follows the rules and training converges"
rm -f "$W/full.jsonl"
"$W/ovf" "${DATA[@]}" --eval image="$W/ex.npy" --eval label="$W/ey.npy" --steps 200 --eval-every 200 \
    --init "$W/init.safetensors" --log "$W/full.jsonl" --log-every 1 >"$W/full.out" 2>&1 ||
    { tail -n 3 "$W/full.out"; bad "200-step run failed"; }
$PY - "$W/full.jsonl" <<'PYEOF' || fail=1
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ev = [o["eval"] for o in L if "eval" in o]
L = [o for o in L if "eval" not in o]
errs = []
# replay the rules from the skipped counts; the log may show S before or after the step
s, good, prev, after, before = 2.0 ** 40, 0, 0, True, True
for o in L:
    skip = o["skipped"] > prev
    prev = o["skipped"]
    before &= o["loss_scale"] == s
    if skip:
        s, good = max(s * 0.5, 1.0), 0
    else:
        good += 1
        if good == 20:
            s, good = s * 2, 0
    after &= o["loss_scale"] == s
if not (after or before):
    errs.append("the logged loss_scale does not follow backoff 0.5 / growth 2 / interval 20")
first_good = next((o["step"] for o in L if o["skipped"] < o["step"]), None)
skipped = L[-1]["skipped"] if L else -1
first = sum(o["loss"] for o in L[first_good:first_good + 10]) / 10 if first_good else 0
last = sum(o["loss"] for o in L[-20:]) / 20
acc = ev[-1]["accuracy"] if ev else 0
print(f"  {len(L)} steps, {skipped} skipped, first step taken: {first_good}, "
      f"final loss scale {L[-1]['loss_scale']:g}, mean loss {first:.3f} -> {last:.3f}, eval accuracy {acc:.4f}")
if not (20 <= skipped <= 40):
    errs.append(f"{skipped} steps skipped; expected 2^40 to back off to a working scale in 20-40 steps")
if not (last < 0.6 and acc > 0.85):
    errs.append(f"did not converge: final mean loss {last:.3f} (< 0.6), accuracy {acc:.4f} (> 0.85)")
for e in errs:
    print("FAIL:", e)
sys.exit(1 if errs else 0)
PYEOF

echo "== 3. overflow at scale 1 stops training with an error"
# d loss / d h (~1e27, f32 since `logits: f32` computes its linear in f32)
# overflows where it is cast to f16 for h's backward: at the cast of h
# inserted on the logits line, or in h's own line
h_line=$(grep -n '^h ' tests/models/ls_hopeless.mp | cut -d: -f1)
logits_line=$(grep -n '^logits' tests/models/ls_hopeless.mp | cut -d: -f1)
sed 's/loss_scale = static(1)/loss_scale = dynamic(init = 2**10)/' tests/models/ls_hopeless.mp >"$W/ls_hopeless_dyn.mp"
for m in tests/models/ls_hopeless.mp "$W/ls_hopeless_dyn.mp"; do
    n=$(basename "$m" .mp)
    build_trainer "$m" "$W/$n" || { fail=1; continue; }
    rm -f "$W/$n.jsonl"
    "$W/$n" "${DATA[@]}" --steps 300 --log "$W/$n.jsonl" --log-every 1 >"$W/$n.out" 2>"$W/$n.err"
    rc=$?
    steps=$(jsonl_field "$W/$n.jsonl" step | tail -n 1)
    # stderr: the progress lines (not a terminal), then the error as the last line
    tail -n 1 "$W/$n.err" >"$W/$n.last"
    echo "  $n: exit $rc after ${steps:-0} logged steps: $(cat "$W/$n.last")"
    [ $rc -eq 1 ] || bad "$n: exit status $rc, expected 1"
    [ "$(grep -ci error "$W/$n.err")" -eq 1 ] || bad "$n: expected one error line, got $(grep -ci error "$W/$n.err")"
    grep -Eq "ls_hopeless(_dyn)?\.mp:($h_line|$logits_line)\b" "$W/$n.last" ||
        bad "$n: the error does not name line $logits_line or $h_line, where d loss / d h overflows f16"
    # fused (compiler/fuse.c), the cast of d h to f16 is kept in registers and
    # the first stored non-finite value is its chain's relu_grad, same line
    grep -Eq "'(linear|cast|relu|relu_grad)'" "$W/$n.last" || bad "$n: the error names no operation"
    grep -Eq 'h\.(weight|bias)' "$W/$n.last" || bad "$n: the error does not name h's parameters"
    want=100; [ "$n" = ls_hopeless_dyn ] && want=110
    [ "${steps:-0}" -ge $((want - 2)) ] && [ "${steps:-0}" -le $((want + 2)) ] ||
        bad "$n: stopped after ${steps:-0} steps, expected about $want: 100 skipped steps at scale 1 (after 10 to back off from 2^10)"
done

echo "== 4. --check-numerics names the forward op that overflowed"
build_trainer tests/models/fwd_overflow.mp "$W/fwd" || exit 1
"$W/fwd" "${DATA[@]}" --steps 5 --check-numerics >"$W/fwd.out" 2>"$W/fwd.err"
rc=$?
echo "  exit $rc: $(head -c 300 "$W/fwd.err")"
[ $rc -eq 1 ] || bad "fwd_overflow --check-numerics: exit $rc, expected 1"
grep -q 'fwd_overflow\.mp:12\b' "$W/fwd.err" || bad "fwd_overflow: the error does not name line 12"
grep -qw 'linear' "$W/fwd.err" || bad "fwd_overflow: the error does not name 'linear'"
exit $fail
