#!/usr/bin/env bash
# t_generated_c.sh - the C program mpcc writes for every example, under
# every policy, is strict C11: no warning with -std=c11 -pedantic -Wall
# -Wextra from gcc (and clang, when installed). Readers and users build it
# with their own flags; it must not complain.
set -euo pipefail
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compilers="cc"
command -v clang >/dev/null && compilers="cc clang"
fail=0
for f in examples/*.mp; do
    name=$(basename "$f" .mp)
    for policy in float32 mixed_float16 mixed_bfloat16; do
        "$MPCC" "$f" --target c --precision $policy -o "$tmp/$name.c"
        for c in $compilers; do
            if ! $c -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only "$tmp/$name.c" 2>"$tmp/err"; then
                echo "FAIL $name ($policy, $c):"; head -n 20 "$tmp/err"; fail=1
            else
                echo "ok   $name ($policy, $c)"
            fi
        done
    done
done
exit $fail
