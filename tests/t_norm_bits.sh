#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_norm_bits.sh - layer_norm, layer_norm_dx and layer_norm_dw
# (runtime/mp_kernels_nn.h), which compute their rows' moments four rows at
# a time (mp_moments4: four independent chains of double sums), give the
# bits of the one-row-at-a-time kernels they replaced (tests/norm/: the old
# code in norm_ref.h, the cases in norm_bits.c), built as trainers are:
# -O2, -O1 -fopenmp, -O3 -march=native -fopenmp (FMA where the CPU has it)
# and -O2 -mavx2 -mfma -fopenmp, on 1 and 2 threads. A mutant (the new
# kernels' eps moved by 1e-4 relative) must be told apart.
set -eu
cd "$(dirname "$0")/.."
CC=${CC:-cc}
export OMP_WAIT_POLICY=passive
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
warn="-Wall -Wextra -Werror -Wshadow -Wno-unused-parameter"
configs=("-O2" "-O1 -fopenmp" "-O3 -march=native -fopenmp")
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then
    configs+=("-O2 -mavx2 -mfma -fopenmp")
fi
fail=0
for i in "${!configs[@]}"; do
    # shellcheck disable=SC2086
    $CC $warn ${configs[$i]} ${SAN:-} -D_POSIX_C_SOURCE=200809L -Iruntime \
        tests/norm/norm_bits.c -o "$tmp/b$i" -lm || { echo "FAIL build: ${configs[$i]}"; fail=1; continue; }
    for th in 1 2; do
        if out=$(OMP_NUM_THREADS=$th "$tmp/b$i"); then
            echo "ok   ${configs[$i]}, $th threads: $out"
        else
            echo "FAIL ${configs[$i]}, $th threads: $out"
            fail=1
        fi
    done
done
if MUTANT=1 "$tmp/b0" >"$tmp/mutant.out"; then
    echo "FAIL the mutant (eps moved) passed: the comparison is blind"
    fail=1
else
    echo "ok   the mutant is told apart: $(cat "$tmp/mutant.out")"
fi
exit $fail
