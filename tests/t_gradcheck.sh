#!/usr/bin/env bash
# t_gradcheck.sh - every operation's gradient against finite differences,
# end to end: each tests/gradcheck/*.mp is compiled with --precision
# float32 --target c, built, and run with --gradcheck (runtime/mp_gradcheck.h).
# The op table drives coverage: every differentiable FWD row of ops.def
# must appear in some model here, so a new op cannot skip this check.
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
    if ! cc -O1 -g -Wall -Werror ${SAN:-} -o "$tmp/$name" "$tmp/$name.c" -lm 2>"$tmp/$name.err"; then
        echo "FAIL $name: the generated C does not build"; head -n 20 "$tmp/$name.err"; fail=1; continue
    fi
    if "$tmp/$name" --gradcheck >"$tmp/$name.out" 2>&1; then
        echo "ok   $name"
    else
        echo "FAIL $name"; cat "$tmp/$name.out"; fail=1
    fi
done
# coverage: the FWD rows of ops.def (accuracy is a metric: no gradient;
# detach's zero gradient is by design not the finite difference: its model
# trains against PyTorch's, tests/t_train_torch.sh)
for op in $(sed -n 's/^OP([A-Z0-9_]*, *"\([a-z0-9_]*\)".*FWD).*/\1/p' compiler/ops.def); do
    [ "$op" = accuracy ] || [ "$op" = detach ] && continue
    case " $seen " in *" $op "*) ;; *) echo "FAIL: no gradient check covers '$op' (add it to tests/gradcheck/)"; fail=1 ;; esac
done
exit $fail
