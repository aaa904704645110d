#!/usr/bin/env bash
# t_gradcheck.sh - every operation's gradient against finite differences,
# end to end: each tests/gradcheck/*.mp is compiled with --precision
# float32 --target c, built, and run with --gradcheck (runtime/mp_gradcheck.h).
# Builds are most of this test's CPU: cc -O0 (the same IEEE arithmetic as
# -O1, no FMA contraction without -march, in a third of the compile time),
# but gc_deep, whose --gradcheck runs for seconds, and its mutants at -Og
# (-O1's run time, under half its compile time).
# The op table drives coverage: every differentiable FWD row of ops.def
# must appear in some model here, so a new op cannot skip this check.
# gc_deep (a deep relu / clamp / max_pool network) passes although many of
# its finite differences cross kinks (skipped and counted), and two
# gradients planted wrong in its generated C are caught, with the
# parameter, the op reading it and the source line.
set -euo pipefail
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
seen=""
for f in tests/gradcheck/*.mp; do
    name=$(basename "$f" .mp)
    if ! "$MPCC" "$f" --target c --precision float32 -o "$tmp/$name.c" 2>"$tmp/$name.err"; then
        echo "FAIL $name: mpcc failed"; cat "$tmp/$name.err"; fail=1; continue
    fi
    seen="$seen $("$MPCC" "$f" --precision float32 --dump-plan=json |
        /usr/bin/python3 -c 'import json,sys; print(" ".join(sorted({n["op"] for n in json.load(sys.stdin)["nodes"] if n["phase"] == "forward"})))')"
    opt=-O0; [ "$name" = gc_deep ] && opt=-Og
    if ! cc "$opt" -g -Wall -Werror ${SAN:-} -o "$tmp/$name" "$tmp/$name.c" -lm 2>"$tmp/$name.err"; then
        echo "FAIL $name: the generated C does not build"; head -n 20 "$tmp/$name.err"; fail=1; continue
    fi
    if "$tmp/$name" --gradcheck >"$tmp/$name.out" 2>&1; then
        echo "ok   $name"
    else
        echo "FAIL $name"; cat "$tmp/$name.out"; fail=1
    fi
done
# Planted wrong gradients in gc_deep (a deep relu / clamp / max_pool network
# whose kinks are skipped, not reported) are still caught, naming the
# parameter, the op that reads it and its source line: relu6's gradient
# cut at 0.5 instead of 6 (block b6's clamp, the first in the backward
# pass), and batch norm's gradient with eps 1 (b6's second one).
mutant() {   # mutant NAME SED WANT...: the mutated program fails --gradcheck, its output matching each WANT (ERE)
    local name=$1 expr=$2
    shift 2
    sed "$expr" "$tmp/gc_deep.c" >"$tmp/$name.c"
    cmp -s "$tmp/gc_deep.c" "$tmp/$name.c" && { echo "FAIL $name: the mutation did not apply"; fail=1; return; }
    cc -Og -o "$tmp/$name" "$tmp/$name.c" -lm || { echo "FAIL $name: does not build"; fail=1; return; }
    if "$tmp/$name" --gradcheck >"$tmp/$name.out" 2>&1; then
        echo "FAIL $name: a wrong gradient passes --gradcheck"; fail=1; return
    fi
    for w in "$@"; do
        grep -qE -- "$w" "$tmp/$name.out" || { echo "FAIL $name: no '$w' in:"; head -n 5 "$tmp/$name.out"; fail=1; return; }
    done
    echo "ok   $name caught"
}
if [ -e "$tmp/gc_deep.c" ]; then
    grep -q "elements skipped: their finite differences cross a kink" "$tmp/gc_deep.out" ||
        { echo "FAIL gc_deep: no count of skipped elements"; fail=1; }
    mutant gc_deep_m1 '0,/\(^    mp_k_clamp_grad(.*\)(float)6);$/s//\1(float)0.5);/' \
        'b6\.bn1\.weight: [0-9]+ wrong, read by batch_norm, gc_deep\.mp:12'
    mutant gc_deep_m2 '0,/\(^    mp_k_batch_norm_dx(.*\)(float)1e-05);$/s//\1(float)1);/' \
        'b6\.pw\.weight: [0-9]+ wrong, read by conv2d, gc_deep\.mp:13' 'b6\.pw\.weight .* FAIL$'
else
    echo "FAIL: tests/gradcheck/gc_deep.mp was not built"; fail=1
fi

# coverage: the FWD rows of ops.def (accuracy is a metric: no gradient;
# detach's zero gradient is by design not the finite difference: its model
# trains against PyTorch's, tests/models/zoo3.mp in tests/t_torch_examples.sh)
for op in $(sed -n 's/^OP([A-Z0-9_]*, *"\([a-z0-9_]*\)".*FWD).*/\1/p' compiler/ops.def); do
    [ "$op" = accuracy ] || [ "$op" = detach ] && continue
    case " $seen " in *" $op "*) ;; *) echo "FAIL: no gradient check covers '$op' (add it to tests/gradcheck/)"; fail=1 ;; esac
done
exit $fail
