#!/usr/bin/env bash
# t_memplan.sh - the memory plan (compiler/memplan.c) and recomputation
# under a budget (compiler/recompute.c), PRECISION.md "Additions: the memory
# plan and recomputation":
#   1. GPT-2 small (examples/gpt2.mp at B 8, T 1024, V 50304, D 768, H 12,
#      L 12, mixed_float16), the CUDA program's plan: at most 6.0 GB a step
#      without a budget (8.40 GB before casts were converted where loaded
#      and cross-entropy's gradient took the logits' buffer), --memory-budget
#      4.5GiB met with at most 35% more FLOPs, 7GiB with at most 3%; a budget
#      below the smallest is refused (exit 1) naming the smallest, and that
#      smallest is met;
#   2. every example and tests/models model, C program, trained 3 steps on
#      synthetic data with evaluations: without a budget, and at the smallest
#      budget its plan names (everything that frees memory recomputed), fused
#      and unfused (each at its own smallest budget): the same log lines (all but samples_per_s) and
#      byte-identical checkpoints; the plan's parameters, gradients,
#      optimizer state and arena are what the C program's --dry-run says it
#      allocates, and the arena is the one the code allocates;
#   3. the CUDA program on the CPU stand-in (char_transformer, mixed_float16:
#      layer norms and cross-entropy reading f16) with and without the
#      budget: identical checkpoints.
# run_all: fusion-independent (it builds every model fused and unfused itself: make test-nofuse skips it)
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

# smallest MODEL.mp [mpcc options]: the smallest budget mpcc names for it
smallest() {
    "$MPCC" "$@" --memory-budget 1 --dump-plan >/dev/null 2>"$tmp/small.err"
    local rc=$?
    [ $rc = 1 ] || { echo "--memory-budget 1 for $1: exit $rc, want 1" >&2; return 1; }
    sed -n 's/.*the smallest budget this model can meet is \([0-9]*\) bytes.*/\1/p' "$tmp/small.err"
}
# jget PLAN.json KEY: a number of the plan's memory object
jget() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["memory"][sys.argv[2]])' "$1" "$2"; }

echo "== 1. GPT-2 small, B 8 x T 1024, mixed_float16"
sed -e 's/^const B = 16 .*/const B = 8/' -e 's/^const T = 64 .*/const T = 1024/' \
    -e 's/^const V = 65 .*/const V = 50304/' -e 's/^const D = 128 .*/const D = 768/' \
    -e 's/^const H = 4 .*/const H = 12/' -e 's/^const L = 4 .*/const L = 12/' \
    -e 's/^  precision .*/  precision = mixed_float16/' examples/gpt2.mp >"$tmp/gpt2s.mp"
[ "$(grep -c '^const [BTVDHL] = [0-9]*$\|^  precision = mixed_float16$' "$tmp/gpt2s.mp")" = 7 ] ||
    bad "the GPT-2 small edit of examples/gpt2.mp did not apply"
# figure BUDGET MAX_BYTES MAX_ADDED_PERCENT
figure() {
    local b=$1 opt=() f
    [ "$b" = none ] || opt=(--memory-budget "$b")
    f="$tmp/gpt2s.$b.json"
    "$MPCC" "$tmp/gpt2s.mp" "${opt[@]}" --dump-plan=json >"$f" 2>"$tmp/g.err" ||
        { bad "GPT-2 small, budget $b: exit $?: $(head -n 1 "$tmp/g.err")"; return; }
    "$PY" - "$f" "$b" "$2" "$3" <<'EOF' || fail=1
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
b, most, pct = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
added = 100 * m["flops_recomputed"] / (m["flops"] - m["flops_recomputed"])
ok = m["step_bytes"] <= most and added <= pct
print(f"{'ok  ' if ok else 'FAIL'} budget {b}: {m['step_bytes']} bytes a step ({m['step_bytes'] / 1e9:.2f} GB), "
      f"arena {m['arena_bytes']}, recomputation adds {added:.1f}% FLOPs (at most {most:.0f} bytes, {pct}%)")
sys.exit(0 if ok else 1)
EOF
}
figure none 6.0e9 0
figure 7GiB "$((7 << 30))" 3
figure 4.5GiB "$((9 << 29))" 35
min=$(smallest "$tmp/gpt2s.mp") && [ -n "$min" ] || bad "GPT-2 small: no smallest budget named"
if [ -n "${min:-}" ]; then
    figure "$min" "$min" 100
    "$MPCC" "$tmp/gpt2s.mp" --memory-budget $((min - 1)) --dump-plan >/dev/null 2>"$tmp/g.err"
    rc=$?
    [ $rc = 1 ] && grep -q "can meet is $min bytes" "$tmp/g.err" &&
        echo "ok   a byte less is refused: $(head -n 1 "$tmp/g.err" | cut -c1-150)" ||
        bad "budget $((min - 1)): exit $rc, want 1 naming $min: $(head -n 1 "$tmp/g.err")"
fi
"$MPCC" "$tmp/gpt2s.mp" --memory-budget 4.5XB >/dev/null 2>"$tmp/g.err"
[ $? = 2 ] && grep -q "expected a size" "$tmp/g.err" || bad "--memory-budget 4.5XB: $(cat "$tmp/g.err")"

echo "== 2. every model, C program: the smallest budget trains to the same bits"
small_models examples/*.mp tests/models/*.mp >"$tmp/models"
while read -r mp; do
    n=$(basename "$mp" .mp)
    # the smallest budget of each: fusion changes what is stored
    b=$(smallest "$mp" --fuse) && [ -n "$b" ] || { bad "$n: no smallest budget named"; continue; }
    u=$(smallest "$mp" --no-fuse) && [ -n "$u" ] || { bad "$n: no smallest budget named (--no-fuse)"; continue; }
    echo "$b" >"$tmp/$n.budget"
    o=$(small_opt "$mp")      # -O0, -Og for the models that run for seconds (lib.sh)
    # (t_fuse.sh builds this same program, as its fused one: one build, cached)
    echo "build_trainer $mp $tmp/$n.none --fuse -- $o"
    echo "build_trainer $mp $tmp/$n.fuse --fuse --memory-budget $b -- $o"
    echo "build_trainer $mp $tmp/$n.no-fuse --no-fuse --memory-budget $u -- $o"
done <"$tmp/models" >"$tmp/jobs"
export -f build_trainer
export MPCC
xargs -P 2 -L 1 bash -c '"$@"' _ <"$tmp/jobs" >"$tmp/builds" 2>&1
cat "$tmp/builds"
[ -s "$tmp/builds" ] && fail=1

while read -r mp; do
    n=$(basename "$mp" .mp)
    [ -x "$tmp/$n.none" ] && [ -x "$tmp/$n.fuse" ] && [ -x "$tmp/$n.no-fuse" ] || continue
    b=$(cat "$tmp/$n.budget")
    "$MPCC" "$mp" --fuse --memory-budget "$b" --dump-plan=json >"$tmp/$n.plan.json" 2>/dev/null ||
        { bad "$n: no plan"; continue; }
    mkdir -p "$tmp/$n" && "$PY" tests/py/synth_data.py "$tmp/$n.plan.json" "$mp" "$tmp/$n" 2 >"$tmp/$n.args"
    data=$(cat "$tmp/$n.args")
    for v in none fuse no-fuse; do
        # shellcheck disable=SC2086
        "$tmp/$n.$v" $data ${data//--data/--eval} --no-shuffle --steps 3 --log-every 1 \
            --eval-every 2 --log "$tmp/$n.$v.jsonl" --save "$tmp/$n.$v.st" >"$tmp/$n.$v.out" 2>&1 ||
            { bad "$n.$v: exit $?: $(tail -n 1 "$tmp/$n.$v.out")"; continue 2; }
        sed -i 's/"samples_per_s":[0-9.e+-]*//' "$tmp/$n.$v.jsonl"
    done
    for v in fuse no-fuse; do
        [ -s "$tmp/$n.$v.jsonl" ] && cmp -s "$tmp/$n.none.jsonl" "$tmp/$n.$v.jsonl" ||
            { bad "$n: the logs differ (budget $b, --$v)"; diff "$tmp/$n.none.jsonl" "$tmp/$n.$v.jsonl" | head -n 4; continue 2; }
        cmp -s "$tmp/$n.none.st" "$tmp/$n.$v.st" || { bad "$n: the checkpoints differ (budget $b, --$v)"; continue 2; }
    done
    # the plan's figures are what the program allocates (its --dry-run, its code)
    # shellcheck disable=SC2086
    "$tmp/$n.fuse" $data --steps 3 --dry-run >"$tmp/$n.dry" 2>/dev/null || { bad "$n: --dry-run failed"; continue; }
    arena=$(sed -n 's/.*mp_alloc_aligned(\([0-9]*\)).*/\1/p' "$tmp/$n.fuse.c" | head -n 1)
    "$PY" - "$tmp/$n.plan.json" "$tmp/$n.dry" "$arena" "$n" "$b" <<'EOF' || fail=1
import json, re, sys
m = json.load(open(sys.argv[1]))["memory"]
dry, arena, n, b = open(sys.argv[2]).read(), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
got = {k.strip(): int(v) for k, v in re.findall(r"^  ([a-z ]+?)\s+(\d+) bytes", dry, re.M)}
want = {"parameters": m["param_bytes"], "gradients": m["grad_bytes"], "optimizer state": m["state_bytes"],
        "activation arena": m["arena_bytes"]}
errs = [f"{k}: --dry-run {got.get(k)}, plan {v}" for k, v in want.items() if got.get(k) != v]
if arena != m["arena_bytes"]:
    errs.append(f"the code allocates {arena} bytes of arena, the plan says {m['arena_bytes']}")
if m["step_bytes"] > b or m["step_bytes"] != sum(want.values()):
    errs.append(f"step {m['step_bytes']} bytes, budget {b}")
kept = sum(1 for s in m["saved"] if not s["recomputed"])
print(f"{'FAIL' if errs else 'ok  '} {n}: budget {b} met, same bits fused and unfused; "
      f"{len(m['saved']) - kept} values recomputed, {kept} kept, +{m['flops_recomputed']:.3g} FLOPs"
      + "".join("\n    " + e for e in errs))
sys.exit(1 if errs else 0)
EOF
done <"$tmp/models"

echo "== 3. the CUDA program on the CPU stand-in, with and without the budget"
n=char_transformer
mp=$(grep "/$n.mp\$" "$tmp/models")      # at section 2's batch (small_models)
b=$(cat "$tmp/$n.budget" 2>/dev/null)
if [ -n "$b" ] && [ -s "$tmp/$n.args" ]; then
    emu_trainer "$mp" "$tmp/cu.none"
    case $? in 2) exit $fail ;; 1) exit 1 ;; esac
    emu_trainer "$mp" "$tmp/cu.budget" --memory-budget "$b" || exit 1
    grep -q "recomputes" <("$MPCC" "$mp" --memory-budget "$b" --dump-plan=json) ||
        bad "$n: nothing recomputed at budget $b"
    data=$(cat "$tmp/$n.args")
    for v in none budget; do
        # shellcheck disable=SC2086
        "$tmp/cu.$v" $data --no-shuffle --steps 3 --save "$tmp/cu.$v.st" >"$tmp/cu.$v.out" 2>&1 ||
            bad "CUDA $v: exit $?: $(tail -n 1 "$tmp/cu.$v.out")"
    done
    cmp -s "$tmp/cu.none.st" "$tmp/cu.budget.st" && echo "ok   $n: CUDA stand-in, budget $b: the same checkpoint" ||
        bad "$n: the CUDA program's checkpoints differ with budget $b"
fi
exit $fail
