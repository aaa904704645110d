#!/usr/bin/env bash
# golden.sh - golden-file tests: each input file sits beside the exact
# output expected from it (jq's style), so a reviewer sees both at once.
#
#   tests/golden.sh            run every case, print a diff for each failure
#   tests/golden.sh --update   rewrite the expected files (review the diff!)
#
# One row of KINDS per kind of case: a directory, the extension of the
# expected file beside each NAME.mp there, and the function that prints
# the actual output for one NAME.mp. To add a kind (say tests/plan/NAME.mp
# -> NAME.txt), add a row and its function; directories that do not exist
# are skipped. Run from anywhere: paths are relative to the repo root, so
# the messages in the expected files are the same on every machine.
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
update=0
[ "${1:-}" = --update ] && update=1

# stderr of a compile that must stop with errors, then its exit status
diag_output() {
    timeout 20 "$MPCC" "$1" --dump-plan 2>&1 >/dev/null
    echo "exit: $?"
}

# the text plan with its warnings (written before it), then the exit status;
# tests/plan without fusion (the precision plan alone, the same whatever the
# default or MPCC_NO_FUSE says), tests/fuse with it (the groups)
plan_text() {
    timeout 20 "$MPCC" "$1" --no-fuse --dump-plan 2>&1
    echo "exit: $?"
}
plan_text_fused() {
    timeout 20 "$MPCC" "$1" --fuse --dump-plan 2>&1
    echo "exit: $?"
}

# the JSON plan alone, so that the expected file is itself valid JSON
plan_json() {
    timeout 20 "$MPCC" "$1" --no-fuse --dump-plan=json 2>/dev/null
}
plan_json_fused() {
    timeout 20 "$MPCC" "$1" --fuse --dump-plan=json 2>/dev/null
}

KINDS=(
    "tests/diag .err diag_output"
    "tests/plan .txt plan_text"
    "tests/plan .json plan_json"
    "tests/fuse .txt plan_text_fused"
    "tests/fuse .json plan_json_fused"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for row in "${KINDS[@]}"; do
    read -r dir ext fn <<<"$row"
    [ -d "$dir" ] || continue
    for mp in "$dir"/*.mp; do
        [ -e "$mp" ] || continue
        want=${mp%.mp}$ext
        "$fn" "$mp" >"$tmp/got"
        if [ "$update" = 1 ]; then
            cp "$tmp/got" "$want"
        elif [ -f "$want" ] && cmp -s "$tmp/got" "$want"; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1))
            echo "FAIL $mp (expected $want)"
            diff -u --label "$want" --label actual "$want" "$tmp/got" 2>&1 | head -n 40
        fi
    done
done
if [ "$update" = 1 ]; then
    echo "golden files rewritten: review them with git diff"
    exit 0
fi
echo "golden: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
