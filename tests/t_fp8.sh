#!/usr/bin/env bash
# run_all: fusion-independent (the runtime's FP8 conversions: no model is compiled)
# t_fp8.sh - runtime/mp_fp8.h (the mixed_float8 policy's e4m3 and e5m2
# quantisation and power-of-two scales) bit for bit against ml_dtypes,
# the reference PRECISION.md names: every pattern of each format, ties,
# saturation, NaN and 10^7 random f32 values (tests/py/fp8.py says what
# exactly). ml_dtypes (PyPI) is pip-installed into a venv in the temp
# folder, like TensorBoard in t_watch.sh; unlike there, nothing here can be
# checked without it, so a failed install fails the test (CI has the
# network and python3-venv: .ci/run). Then the GEMM packing's branch-free
# rounding (mp_fp8_round_fast) against mp_fp8_round on all 2^32 f32
# values of each format.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
CC=${CC:-cc}
$CC -std=c11 -O2 -Wall -Wextra -Werror ${SAN:-} -Iruntime -o "$tmp/fp8_conv" tests/fp8_conv.c ||
    { echo "FAIL: tests/fp8_conv.c does not build"; exit 1; }
if ! { $PY -m venv --system-site-packages "$tmp/venv" >"$tmp/pip.log" 2>&1 &&
       timeout 300 "$tmp/venv/bin/pip" install -q ml_dtypes >>"$tmp/pip.log" 2>&1; }; then
    echo "FAIL: ml_dtypes could not be installed into a venv: $(tail -n 1 "$tmp/pip.log")"
    exit 1
fi
"$tmp/venv/bin/python" tests/py/fp8.py "$tmp/fp8_conv" "$tmp" || bad "mp_fp8.h differs from ml_dtypes (above)"
# the GEMM packing's branch-free rounding equals the exact one on every f32
for f in e4m3 e5m2; do
    "$tmp/fp8_conv" same $f || bad "mp_fp8_round_fast ($f) differs from mp_fp8_round (above)"
done
[ $fail = 0 ] && echo "t_fp8: e4m3 and e5m2 equal ml_dtypes on every pattern, tie, saturation, NaN and 10^7 random values; scale exponents exact; the packing's rounding equals the exact one on all 2^32 f32 values"
exit $fail
