#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_attn_bits.sh - the CPU attention kernels (runtime/mp_kernels_nn.h)
# give the bits of the unblocked kernels they replaced (tests/attn/: the old
# code in attn_ref.c, built with -ffp-contract=off, the cases in
# attn_bits.c), built as a trainer may be:
#   -O2                          the tests' plain build (no FMA in the target)
#   -O1 -fopenmp                 threads (OMP_NUM_THREADS=2)
#   -O3 -march=native -fopenmp   the benchmarks' build: FMA, contraction on
#   -O3 -mavx2 -mfma             FMA with generic tuning (-march=native on
#                                AMD Zen avoids fusing loop-carried sums; this
#                                fuses them): the kernels must fuse none
#   clang -O3 -march=native      where clang is installed
# each in the C dialect trainers are built in (GNU: contraction on by
# default), each run under every MP_CPU path. Two mutants of the runtime must fail:
# the fp-contract pragma removed (GCC's, and clang's where it is installed;
# built -mavx2 -mfma, where the CPU has them) and the weighted sums' order
# reversed.
set -eu
cd "$(dirname "$0")/.."
CC=${CC:-cc}
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
warn="-Wall -Wextra -Werror -Wshadow -Wno-unused-parameter"
fail=0

build() {   # build NAME RUNTIME_DIR COMPILER FLAGS...
    local name=$1 rt=$2 cc=$3
    shift 3
    # shellcheck disable=SC2086
    $cc $warn -O2 -ffp-contract=off ${SAN:-} -D_POSIX_C_SOURCE=200809L -I"$rt" \
        -c tests/attn/attn_ref.c -o "$tmp/$name.ref.o" &&
    $cc $warn "$@" ${SAN:-} -D_POSIX_C_SOURCE=200809L -I"$rt" \
        tests/attn/attn_bits.c "$tmp/$name.ref.o" -o "$tmp/$name" -lm
}

paths=(portable) fma=0
configs=("$CC -O2" "$CC -O1 -fopenmp" "$CC -O3 -march=native -fopenmp")
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then
    paths+=(avx2) fma=1
    configs+=("$CC -O3 -mavx2 -mfma")
fi
clang=$(command -v clang || true)
[ -n "$clang" ] && configs+=("clang -O3 -march=native") || echo "note: no clang: its build is not tested"
for i in "${!configs[@]}"; do
    # shellcheck disable=SC2086
    build "c$i" runtime ${configs[$i]} || { echo "FAIL: does not build with ${configs[$i]}"; fail=1; continue; }
    for p in "${paths[@]}"; do
        if MP_CPU=$p "$tmp/c$i" >"$tmp/c$i.$p.out"; then
            echo "ok   ${configs[$i]}, MP_CPU=$p: $(tail -n 1 "$tmp/c$i.$p.out")"
        else
            echo "FAIL ${configs[$i]}, MP_CPU=$p:"; head -n 5 "$tmp/c$i.$p.out"; fail=1
        fi
    done
done

mutant() {   # mutant NAME WHAT SED FLAGS...: must build and fail
    local name=$1 what=$2 expr=$3
    shift 3
    mkdir -p "$tmp/rt_$name" && cp runtime/*.h "$tmp/rt_$name/"
    sed -i "$expr" "$tmp/rt_$name/mp_kernels_nn.h"
    if cmp -s runtime/mp_kernels_nn.h "$tmp/rt_$name/mp_kernels_nn.h"; then
        echo "FAIL mutant $name: the mutation did not apply"; fail=1; return
    fi
    # the reference stays today's: the mutant changes only the kernels under test
    build "$name" "$tmp/rt_$name" "$@" || { echo "FAIL mutant $name does not build"; fail=1; return; }
    if "$tmp/$name" >"$tmp/$name.out"; then
        echo "FAIL mutant $name ($what) not caught"; fail=1
    else
        echo "ok   mutant $name ($what) caught: $(grep -m 1 FAIL "$tmp/$name.out" | cut -c 1-100)"
    fi
}
if [ "$fma" = 1 ]; then
    mutant contract "products fused into sums" '/pragma GCC optimize("fp-contract=off")/d' \
        "$CC" -O3 -mavx2 -mfma
    [ -n "$clang" ] && mutant contract_clang "products fused into sums by clang" \
        '/pragma clang fp contract(off)/d' clang -O3 -mavx2 -mfma
fi
mutant order "y, dq, dk and dv summed backwards" \
    's/for (int64_t t = 0; t < n; t++) {/for (int64_t t = n - 1; t >= 0; t--) {/' "$CC" -O2
exit $fail
