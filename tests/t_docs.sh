#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_docs.sh - the user's reference in docs/ covers what the code offers:
#   docs/LANGUAGE.md  every operation of compiler/ops.def (FWD rows) and every
#                     name sema.c lets a model call (built-ins, optimizers,
#                     schedules, loss scales, policies, initialisers, train
#                     block keys), and every option of `mpcc --help`;
#   docs/TRAINER.md   every option the generated program's --help lists (a
#                     model with several inputs and one with a window input);
#   docs/PLAN.md      every column of the text plan and every key of the json
#                     plan;
#   docs/*.md         every environment variable the code reads (getenv);
#   README.md         links the three files and sends no one to ../shared/spec.
# A name counts as documented when it starts a code span: `name`, `name(...)`,
# `name = ...`, `--opt VALUE`. Exits 1 and says which names to add to which
# file when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MPCC=$(cd "$(dirname "${MPCC:-./mpcc}")" && pwd)/$(basename "${MPCC:-./mpcc}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LANGDOC=docs/LANGUAGE.md TRAINDOC=docs/TRAINER.md PLANDOC=docs/PLAN.md
fail=0

for f in "$LANGDOC" "$TRAINDOC" "$PLANDOC"; do
    [ -f "$f" ] || { echo "FAIL: $f is missing"; exit 1; }
done

# The infix operators may be documented by their symbol instead of the name
# the plan gives them (the backquotes are literal: shellcheck SC2016).
# shellcheck disable=SC2016
declare -A symbol=([add]='`a + b`' [sub]='`a - b`' [mul]='`a * b`' [div]='`a / b`' [neg]='`-a`' [matmul]='`a @ b`')

# documented FILE NAME: NAME starts a code span of FILE (`NAME`, `NAME(`,
# `NAME =`, `NAME VALUE`, `NAME=`, `NAME[`), or NAME is an infix operator
# whose symbol is shown.
documented() {
    grep -qF -e "\`$2\`" -e "\`$2(" -e "\`$2 " -e "\`$2=" -e "\`$2[" "$1" ||
        { [ -n "${symbol[$2]:-}" ] && grep -qF -- "${symbol[$2]}" "$1"; }
}

# require FILE WHAT NAME...: every NAME documented in FILE, else one message
# naming the missing ones ($SHOWN, when set, names FILE in the message).
require() {
    local file=$1 what=$2 shown=${SHOWN:-$1} missing=()
    shift 2
    for name in "$@"; do
        documented "$file" "$name" || missing+=("$name")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "FAIL: $shown does not document ${#missing[@]} $what: ${missing[*]}"
        echo "      add each to $shown, written as \`name\` or \`name(...)\` (options as \`--opt VALUE\`)"
        fail=1
    else
        echo "ok   $shown documents every one of $# $what"
    fi
}

# ---- operations: ops.def FWD rows ------------------------------------------
mapfile -t fwd < <(sed -nE 's/^OP\([A-Z0-9_]+, *"([a-z0-9_]+)", *-?[0-9]+, *[A-Z0-9]+, *FWD *\).*/\1/p' compiler/ops.def)
[ ${#fwd[@]} -gt 20 ] || { echo "FAIL: found only ${#fwd[@]} FWD rows in compiler/ops.def: the row format changed?"; exit 1; }
require "$LANGDOC" "operations of compiler/ops.def (FWD rows)" "${fwd[@]}"

# ---- names a model calls or writes, from sema.c's tables -------------------
mapfile -t builtins < <(sed -nE 's/^ *\{"([a-z0-9_]+)", OP_[A-Z0-9_]+, (lower|bad)_.*/\1/p' compiler/sema.c | sort -u)
[ ${#builtins[@]} -gt 20 ] || { echo "FAIL: found only ${#builtins[@]} built-ins in compiler/sema.c"; exit 1; }
require "$LANGDOC" "built-in operations of compiler/sema.c" "${builtins[@]}"
mapfile -t named < <(grep -oE '\{"[a-z0-9_]+", (OPT|LS|SCHED|POLICY|INIT)_[A-Z0-9_]+' compiler/sema.c \
                     | sed -E 's/\{"([a-z0-9_]+)".*/\1/' | sort -u)
require "$LANGDOC" "optimizers, loss scales, schedules, policies and initialisers of compiler/sema.c" "${named[@]}"
mapfile -t keys < <(grep -oE '\{"[a-z0-9_]+", tk_' compiler/sema.c | sed -E 's/\{"([a-z0-9_]+)".*/\1/')
[ ${#keys[@]} -gt 5 ] || { echo "FAIL: found no train block keys in compiler/sema.c"; exit 1; }
require "$LANGDOC" "train block keys of compiler/sema.c" "${keys[@]}"

# ---- mpcc's options -----------------------------------------------------------
"$MPCC" --help >"$tmp/mpcc_help"
mapfile -t mopts < <(grep -E '^ +-' "$tmp/mpcc_help" | grep -oE -- '(^|[ ,])--?[a-z][a-z0-9-]*' | tr -d ' ,' | sort -u)
[ ${#mopts[@]} -gt 5 ] || { echo "FAIL: found only ${#mopts[@]} options in mpcc --help"; exit 1; }
require "$LANGDOC" "options of mpcc --help" "${mopts[@]}"

# ---- the generated program's options --------------------------------------
: >"$tmp/help"
for m in mnist_mlp gpt2; do            # several inputs; a window input
    "$MPCC" "examples/$m.mp" --target c -o "$tmp/$m.c"
    cc -O0 -w "$tmp/$m.c" -lm -o "$tmp/$m"
    "$tmp/$m" --help >>"$tmp/help"
done
mapfile -t topts < <(grep -oE -- '--[a-z][a-z0-9-]*' "$tmp/help" | sort -u)
[ ${#topts[@]} -gt 10 ] || { echo "FAIL: found only ${#topts[@]} options in the program's --help"; exit 1; }
require "$TRAINDOC" "options of the generated program's --help" "${topts[@]}"

# ---- the plan ------------------------------------------------------------------
"$MPCC" examples/mnist_mlp.mp --dump-plan >"$tmp/plan"
read -r -a cols < <(grep -A1 '^forward pass' "$tmp/plan" | tail -1)
[ ${#cols[@]} -ge 9 ] || { echo "FAIL: no column header in the text plan"; exit 1; }
require "$PLANDOC" "columns of the text plan" "${cols[@]}"
"$MPCC" examples/mnist_mlp.mp --dump-plan=json >"$tmp/plan.json"
mapfile -t jkeys < <(grep -oE '"[a-z_0-9]+":' "$tmp/plan.json" | tr -d '":' | sort -u)
[ ${#jkeys[@]} -gt 20 ] || { echo "FAIL: found only ${#jkeys[@]} keys in the json plan"; exit 1; }
require "$PLANDOC" "keys of the json plan" "${jkeys[@]}"

# ---- environment variables -------------------------------------------------
mapfile -t envs < <(grep -rhoE 'getenv\("[A-Z_0-9]+"\)' compiler runtime templates tools \
                    | sed -E 's/getenv\("([A-Z_0-9]+)"\)/\1/' | sort -u)
cat "$LANGDOC" "$TRAINDOC" "$PLANDOC" >"$tmp/all.md"
[ ${#envs[@]} -gt 0 ] && SHOWN="$TRAINDOC (or another docs/ reference)" \
    require "$tmp/all.md" "environment variables read by the code (getenv)" "${envs[@]}"

# ---- README ------------------------------------------------------------------
if grep -n 'shared/spec' README.md; then
    echo "FAIL: README.md sends users to ../shared/spec (not in a clone): link docs/ instead"
    fail=1
fi
for f in "$LANGDOC" "$TRAINDOC" "$PLANDOC"; do
    grep -qF "($f)" README.md || { echo "FAIL: README.md does not link $f"; fail=1; }
done

exit $fail
