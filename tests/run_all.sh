#!/usr/bin/env bash
# run_all.sh - runs every test of the project and says how many passed.
#   $B/tests/test_*   cmocka unit tests (one program per module)
#   tests/t_*.sh      end-to-end tests (golden files, generated trainers,
#                     PyTorch references); each exits non-zero on failure
# Any failure fails the run. Set ONLY=pattern to run a subset.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
export MPCC=${MPCC:-./mpcc} B SAN=${SAN:-}
pass=0 fail=0 failed=()
logdir=$B/test-logs
mkdir -p "$logdir"
for t in "$B"/tests/test_* tests/t_*.sh; do
    [ -e "$t" ] || continue
    name=$(basename "$t")
    [ -n "${ONLY:-}" ] && [[ $name != *$ONLY* ]] && continue
    start=$(date +%s)
    if timeout 1800 "$t" >"$logdir/$name.log" 2>&1; then
        pass=$((pass + 1))
        echo "PASS $name ($(( $(date +%s) - start ))s)"
    else
        fail=$((fail + 1))
        failed+=("$name")
        echo "FAIL $name ($(( $(date +%s) - start ))s); last lines of $logdir/$name.log:"
        tail -n 30 "$logdir/$name.log" | sed 's/^/    /'
    fi
done
echo
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
