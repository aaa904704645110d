#!/usr/bin/env bash
# run_all.sh - runs every test of the project and says how many passed.
#   $B/tests/test_*   cmocka unit tests (one program per module)
#   tests/t_*.sh      end-to-end tests (golden files, generated trainers,
#                     PyTorch references); each exits non-zero on failure
# Any failure fails the run.
#   ONLY=pattern   run the tests whose name contains pattern; a pattern
#                  that matches no test fails the run (a typo must not pass)
#   MPCC_NO_FUSE=1 (make test-nofuse): tests marked "run_all: fusion-independent"
#                  (they never use mpcc's default fusion: kernels, converters,
#                  fused-vs-unfused comparisons with explicit flags) are
#                  skipped (unless ONLY names them), since make test ran them
#                  with the same result;
#                  so are tests marked "run_all: once", whose subject fusion
#                  does not change (the trainer's signals, faults and files)
#                  or which CI's time allows once (the CUDA builds and the
#                  stand-in: run them with MPCC_NO_FUSE=1 ONLY=t_cuda by hand)
#   JOBS=n         tests run n at a time (default 2: CI's two cores). Each
#                  test works in its own temporary folder, so they are
#                  independent; the slowest known ones start first.
#                  OMP_NUM_THREADS defaults to the cores / n (at least 1).
# Every test has a 30-minute limit, a guard against a hang only: no test
# waits on time, each waits on the state it checks.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
export MPCC=${MPCC:-./mpcc} B SAN=${SAN:-}
# Two tests share two cores: OpenMP threads that spin while they wait
# would take whole scheduler ticks from the other test (README).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
jobs=${JOBS:-2}
# and the programs' OpenMP threads (and PyTorch's) share the cores among
# the tests that run at once: two tests of two threads each on two cores
# wait at every barrier for a thread the scheduler has set aside, which
# made a run under load up to 4x its CPU time in wall time. Tests of the
# threaded paths set their own OMP_NUM_THREADS (t_threads_bits,
# t_attn_bits, t_norm_bits, t_optim_pass, t_random, t_kernels_torch).
cores=$(nproc 2>/dev/null || echo 2)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / jobs > 1 ? cores / jobs : 1 ))}
logdir=$B/test-logs
mkdir -p "$logdir"
# The compile cache (tests/cc_cache.sh): cc, gcc, clang, g++, c++ and
# clang++ on the tests' PATH copy a build made before with the same
# compiler, options and preprocessed source (by another test, or by make
# test where make test-nofuse's program is the same) instead of compiling
# again. It lives in $B/cc-cache (make clean empties it); MP_CC_CACHE=0
# compiles everything.
export MP_CC_CACHE_DIR=$PWD/$B/cc-cache
mkdir -p "$MP_CC_CACHE_DIR/bin"
for c in cc gcc clang g++ c++ clang++; do    # those installed (tests ask command -v)
    rm -f "$MP_CC_CACHE_DIR/bin/$c"
    command -v "$c" >/dev/null && ln -s "$PWD/tests/cc_cache.sh" "$MP_CC_CACHE_DIR/bin/$c"
done
export PATH=$MP_CC_CACHE_DIR/bin:$PATH
hits0=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^hit ')
misses0=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^miss ')
splits0=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^split ')
lines0=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | wc -l)

# The source that carries a test's markers: the script, or a unit's .c.
source_of() { case $1 in *.sh) echo "$1" ;; *) echo "tests/unit/$(basename "$1").c" ;; esac; }

tests=() skipped=()
for t in "$B"/tests/test_* tests/t_*.sh; do
    [ -e "$t" ] || continue
    name=$(basename "$t")
    [ -n "${ONLY:-}" ] && [[ $name != *$ONLY* ]] && continue
    if [ "${MPCC_NO_FUSE:-}" = 1 ] && [ -z "${ONLY:-}" ] && grep -qE 'run_all: (fusion-independent|once)' "$(source_of "$t")" 2>/dev/null; then
        skipped+=("$name")
        continue
    fi
    tests+=("$t")
done
[ ${#skipped[@]} -gt 0 ] && echo "SKIP (fusion-independent or once, run by make test): ${skipped[*]}"
if [ ${#tests[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ]; then
    echo "no test matches ONLY=${ONLY:-} (names: $B/tests/test_*, tests/t_*.sh)"
    echo "0 passed, 1 failed"
    exit 1
fi

# Longest first, by the time each took in the last run here ($logdir/times,
# else tests/run_all.times: seconds measured on a 2-core machine, for a fresh
# clone), so that two at a time finish together; unknown ones first of all.
# Only the order depends on these times, never a result.
order() {
    local t name s times=$logdir/times
    [ -e "$times" ] || times=tests/run_all.times
    for t in "${tests[@]}"; do
        name=$(basename "$t")
        s=$(awk -v n="$name" '$1 == n { s = $2 } END { print (s == "" ? 100000 : s) }' \
            "$times" 2>/dev/null || echo 100000)
        printf '%s %s\n' "$s" "$t"
    done | sort -k1,1nr -k2,2 | cut -d' ' -f2-
}

run_one() {    # run_one TEST: its log, a result line in $logdir/NAME.result
    local t=$1 name start rc cpu
    name=$(basename "$t")
    start=$(date +%s)
    MP_CC_TEST=$name timeout 1800 "$t" >"$logdir/$name.log" 2>&1
    rc=$?
    # the CPU seconds of the test's processes (this subshell's children,
    # the second line of bash's times: user and system), for the report
    times >"$logdir/$name.times"
    cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] }
                         printf "%.0f", s }' "$logdir/$name.times")
    echo "$rc $(( $(date +%s) - start )) $cpu" >"$logdir/$name.result"
}

# compiling NAME: the CPU seconds the compile cache's log gives the test
# in this run (its builds, a split build's runtime part counted in its line)
compiling() {
    awk -v n="$1" -v l0="$lines0" 'NR > l0 && $3 == n && ($1 == "split" || ($1 == "miss" && !/-DMP_PART_RUNTIME/)) { s += $2 }
                   END { printf "%.0f", s }' "$MP_CC_CACHE_DIR/log" 2>/dev/null || echo 0
}

report() {     # report NAME: PASS/FAIL line (and the log's tail on failure)
    local name=$1 rc s cpu cc
    read -r rc s cpu <"$logdir/$name.result"
    echo "$name $s" >>"$logdir/times.new"
    cpu_total=$((cpu_total + ${cpu:-0}))
    cc=$(compiling "$name")
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS $name (${s}s, ${cpu:-?}s CPU, ${cc}s of it compiling)"
    else
        fail=$((fail + 1))
        failed+=("$name")
        echo "FAIL $name (${s}s, ${cpu:-?}s CPU, ${cc}s of it compiling, exit $rc); last lines of $logdir/$name.log:"
        tail -n 30 "$logdir/$name.log" | sed 's/^/    /'
    fi
}

finish_one() { # block until one running test exits (bash's wait -n -p: its
               # pid), then report it; no polling, no sleeping
    local pid=
    wait -n -p pid
    if [ -z "$pid" ]; then     # no child left to wait for: none can report
        for pid in "${!running[@]}"; do
            echo "1 0" >"$logdir/${running[$pid]}.result"; report "${running[$pid]}"
        done
        running=()
        return
    fi
    [ -e "$logdir/${running[$pid]}.result" ] || echo "1 0" >"$logdir/${running[$pid]}.result"
    report "${running[$pid]}"
    unset "running[$pid]"
}

pass=0 fail=0 failed=() cpu_total=0
: >"$logdir/times.new"
declare -A running=()     # pid -> test name
mapfile -t queue < <(order)
for t in "${queue[@]}"; do
    while [ ${#running[@]} -ge "$jobs" ]; do
        finish_one
    done
    name=$(basename "$t")
    rm -f "$logdir/$name.result"
    run_one "$t" &
    running[$!]=$name
done
while [ ${#running[@]} -gt 0 ]; do
    finish_one
done
# Keep the times of tests not run this time (an ONLY run).
if [ -e "$logdir/times" ]; then
    awk 'NR == FNR { seen[$1] = 1; print; next } !($1 in seen)' \
        "$logdir/times.new" "$logdir/times" >"$logdir/times.tmp" &&
        mv "$logdir/times.tmp" "$logdir/times"
    rm -f "$logdir/times.new"
else
    mv "$logdir/times.new" "$logdir/times"
fi

echo
hits=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^hit ')
misses=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^miss ')
splits=$(cat "$MP_CC_CACHE_DIR/log" 2>/dev/null | grep -c '^split ')
echo "tests' CPU time ${cpu_total}s; compile cache: $((hits - hits0)) builds copied," \
    "$((misses - misses0 + splits - splits0)) compiled, $((splits - splits0)) of them in two parts" \
    "(their runtime parts counted too, as copied or compiled)"
[ "$fail" -gt 0 ] && echo "failed: ${failed[*]}"
if [ ${#skipped[@]} -gt 0 ]; then
    echo "$pass passed, $fail failed, ${#skipped[@]} skipped"
else
    echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
