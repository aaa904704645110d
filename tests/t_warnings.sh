#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_warnings.sh - the generated C program builds without a warning under the
# optimising builds users run (TRAINER.md "Additions for the architectures
# users bring"): -Wall -Wextra -Werror with
#     -O2            -O2 -fopenmp
#     -O3 -march=native             -O3 -march=native -fopenmp
# from GCC and Clang (GCC only, said so, where clang is not installed), for
# every model the tests compile to programs: examples/*.mp, tests/models,
# tests/gradcheck, tests/cuda, tests/fuse, tests/plan (not tests/diag and
# the fuzz corpus: those are rejected), fused or unfused (--fuse,
# --no-fuse; below). Optimiser warnings (-Waggressive-loop-optimizations,
# -Wstringop-overflow, -Warray-bounds, -Wmaybe-uninitialized) come from the
# runtime inlined into a model's own sizes, so -fsyntax-only
# (t_generated_c.sh) cannot see them: every file is compiled (-c; Clang's
# to LLVM IR, -emit-llvm, after its optimiser, but for one build of each
# flag set: see build below).
#
# Every combination of compiler and flags for every program is some 1600
# builds (100 models, fused and unfused, 8 combinations). By default each
# model is built once, some 100 builds (CI's time: each takes 5 to 10 s):
# the combinations rotate over the models, and the mode over runs of eight
# models (eight fused, eight unfused, ...), so that both modes meet every
# combination; each model's program is compiled by one compiler at one
# level. WARN_BOTH=1 builds each model fused and unfused (the unfused
# taking the complement of the fused one's combination: the other
# compiler, the other -O level, OpenMP flipped); WARN_FULL=1 builds every
# combination of both; MODELS="a.mp b.mp" checks only those; JOBS
# (default 2) builds run at once.
#
# Models under mixed_float8 are built as any other (the C program
# quantises; the CUDA program refuses them: t_plan_rules.sh).
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
JOBS=${JOBS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }   # stderr: the loop below writes the build list to stdout
start=$(date +%s)

compilers=(gcc clang)
if ! command -v clang >/dev/null; then
    compilers=(gcc)
    echo "note: clang is not installed: GCC only"
fi
flagsets=("-O2" "-O2 -fopenmp" "-O3 -march=native" "-O3 -march=native -fopenmp")
combos=()
for c in "${compilers[@]}"; do
    for f in "${flagsets[@]}"; do combos+=("$c $f"); done
done
ncombo=${#combos[@]}

models=()
for mp in ${MODELS:-examples/*.mp tests/models/*.mp tests/gradcheck/*.mp tests/cuda/*.mp \
          tests/fuse/*.mp tests/plan/*.mp}; do
    [ -L "$mp" ] && continue        # tests/plan links the examples for golden.sh
    models+=("$mp")
done

# the programs, and the builds of each (one line per build: file, compiler,
# flags, and "full" where clang too compiles to an object)
i=0
for mp in "${models[@]}"; do
    id=$(dirname "$mp" | tr / _)_$(basename "$mp" .mp)
    if [ -n "${WARN_FULL:-}${WARN_BOTH:-}" ]; then
        modes="fuse no-fuse"
    elif [ $(( i / ncombo % 2 )) = 0 ]; then
        modes=fuse
    else
        modes=no-fuse
    fi
    for mode in $modes; do
        c=$tmp/$id.$mode.c
        if ! "$MPCC" "$mp" --target c --$mode -o "$c" 2>"$tmp/mpcc.err"; then
            bad "mpcc --$mode $mp: $(head -n 3 "$tmp/mpcc.err")"
            continue
        fi
        if [ -n "${WARN_FULL:-}" ]; then
            picks=$(seq 0 $((ncombo - 1)))
        elif [ $mode = fuse ]; then
            picks=$((i % ncombo))
        else
            picks=$((ncombo - 1 - i % ncombo))
        fi
        for k in $picks; do echo "$c ${combos[$k]}"; done
    done
    i=$((i + 1))
done >"$tmp/builds.all"
# one build of each combination compiles its whole file to an object
# ("full"): that of the smallest program, so that it costs a small
# model's build (the examples' took up to 45 s)
while read -r c rest; do echo "$(stat -c %s "$c") $c $rest"; done <"$tmp/builds.all" |
    sort -s -n -k1,1 |
    awk '{ k = ""; for (i = 3; i <= NF; i++) k = k " " $i
           print $2 k ((k in seen) ? "" : " full"); seen[k] = 1 }' >"$tmp/builds"

# Clang's warnings come from its front end and its optimiser (a loop
# pragma the vectoriser cannot honour: -Wpass-failed), both of which run
# with -emit-llvm; only x86 code generation is left out, some 40% of a
# build, whose own diagnostics (the runtime's inline asm, the same in every
# program) one clang build of each flag set still sees: it is built to an
# object as every GCC build is (marked "full" in $tmp/builds).
#
# Under tests/run_all.sh the compile cache builds a program in its two
# parts (runtime/mp_model.h, MP_PART_*; tests/cc_cache.sh): the runtime's
# part, the same text in every program, once per flag set, and each
# model's part, its code with the kernels inlined at its sizes, where the
# optimiser's warnings come from. The "full" build of each flag set
# compiles a whole file (MP_CC_SPLIT=0), as a user does: the runtime's
# part is checked once more there, inside a whole program.
# build FILE.c CC FLAGS... [full]: compiles; any diagnostic is a failure
build() {
    local c=$1 cc=$2
    shift 2
    local stop=-c split=1
    if [ "${*: -1}" = full ]; then
        set -- "${@:1:$#-1}"
        split=0
    elif [ "$cc" = clang ]; then
        stop="-c -emit-llvm"
    fi
    local log
    log=$(mktemp "$c.XXXX.log")
    # shellcheck disable=SC2086
    if MP_CC_SPLIT=$split "$cc" "$@" -Wall -Wextra -Werror $stop "$c" -o /dev/null >"$log" 2>&1 && [ ! -s "$log" ]; then
        echo "ok   $(basename "$c" .c) ($cc $* $stop)"
    else
        echo "FAIL $(basename "$c" .c) ($cc $* $stop):"
        head -n 25 "$log" | sed 's/^/    /'
    fi
    rm -f "$log"
}
export -f build
xargs -P "$JOBS" -L 1 bash -c 'build "$@"' _ <"$tmp/builds" >"$tmp/results" 2>&1
cat "$tmp/results"
n=$(wc -l <"$tmp/builds")
nok=$(grep -c '^ok ' "$tmp/results")
[ "$nok" = "$n" ] || bad "$((n - nok)) of $n builds warned or failed"
echo "$n builds of ${#models[@]} models (${compilers[*]}) in $(( $(date +%s) - start ))s"
[ $fail = 0 ] && echo "PASS: t_warnings" || echo "FAIL: t_warnings"
exit $fail
