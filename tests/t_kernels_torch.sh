#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_kernels_torch.sh - the runtime's kernels against PyTorch 1.13 and numpy
# (tests/kernels_torch.py), in each way a trainer may be built:
#   0: -O2 -DMP_GEMM_PORTABLE (the vector-extension micro-kernel, no threads),
#   1: -O3 -march=native -fopenmp (AVX2/FMA micro-kernel where the CPU has
#      it, threads),
#   2: -DMP_USE_CBLAS with OpenBLAS (when cblas.h is installed).
# The unit tests (tests/unit/test_kernels.c) are rebuilt and run in these
# ways too, and once more as -O2 -DMP_GEMM_MODEL16 (the AVX-512 kernels'
# 16-wide models, 6x32 tiles and bf16 pairs, in place of any other kernel:
# their packing and edges tested on every CPU); `make` builds them as
# `cc -O2`, where x86 CPUs take the AVX2 or AVX-512 micro-kernels by
# run-time dispatch.
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
CC=${CC:-cc}
PY=/usr/bin/python3
# Threads sleep rather than spin while waiting: CI machines are shared, and
# spinning threads there cost whole scheduler ticks. (Results do not depend
# on it; the threaded paths run all the same.)
export OMP_WAIT_POLICY=passive
# Two threads whatever run_all.sh chose for the tests beside this one: the
# threaded configurations must run their threaded paths.
export OMP_NUM_THREADS=2
out=$B/tests/kernels_torch
mkdir -p "$out"
warn="-std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-missing-field-initializers"

configs=("-O2 -DMP_GEMM_PORTABLE" "-O3 -march=native -fopenmp")
libs=("" "")
if echo '#include <cblas.h>' | $CC -E - >/dev/null 2>&1; then
    configs+=("-O1 -fopenmp -DMP_USE_CBLAS")
    libs+=("-lopenblas")
else
    echo "note: cblas.h not found: the MP_USE_CBLAS build is not tested"
fi

# Build everything first, two compilers at a time.
build() {   # build INDEX SOURCE OUTPUT [LIBS...]
    local i=$1 src=$2 bin=$3
    shift 3
    # shellcheck disable=SC2086
    $CC $warn ${configs[$i]} ${SAN:-} -Iruntime -o "$bin" "$src" "$@" ${libs[$i]} -lm
}
pids=()
for i in "${!configs[@]}"; do
    build "$i" tests/kernels_torch.c "$out/driver$i" & pids+=($!)
    build "$i" tests/unit/test_kernels.c "$out/test_kernels$i" -lcmocka & pids+=($!)
    if [ ${#pids[@]} -ge 2 ]; then
        for p in "${pids[@]}"; do wait "$p"; done
        pids=()
    fi
done
$CC $warn -O2 -DMP_GEMM_MODEL16 ${SAN:-} -Iruntime -o "$out/test_kernels_model16" \
    tests/unit/test_kernels.c -lcmocka -lm & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done

fail=0
echo "== -O2 -DMP_GEMM_MODEL16 (test_kernels)"
MP_CPU=portable "$out/test_kernels_model16" || fail=1   # the level plays no part in its products
for i in "${!configs[@]}"; do
    echo "== ${configs[$i]}"
    quick=--no-conversions          # the conversions are integer code: once
    [ "$i" -eq 0 ] && quick=
    $PY tests/kernels_torch.py "$out/driver$i" $quick || fail=1
    "$out/test_kernels$i" || fail=1
done
exit $fail
