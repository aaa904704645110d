"""fp8.py - runtime/mp_fp8.h against ml_dtypes (tests/t_fp8.sh).

    python fp8.py BIN DIR
BIN is tests/fp8_conv.c built; DIR a scratch folder. For e4m3
(ml_dtypes.float8_e4m3fn) and e5m2 (ml_dtypes.float8_e5m2) it checks, bit
for bit:
  - decoding: all 256 patterns to f32;
  - encoding: the 256 patterns' values; every tie (the midpoint of two
    neighbouring fp8 values, either sign) and its two f32 neighbours, with
    ties also checked to land on the even pattern; saturation (max, above
    max, FLT_MAX, infinities: +-max); NaNs of several payloads (the quiet
    NaN with its sign); 10^7 random f32 values (random bit patterns, values
    log-uniform over the formats' range and beyond, values near ties);
    mp_fp8.h saturates, so the reference is ml_dtypes' cast of the value
    clamped to [-max, max];
  - the scale exponent: the largest e with amax * 2^e <= max, less the
    margin, in exact rational arithmetic (fractions), for random, subnormal,
    power-of-two and boundary amaxes; zero and non-finite amaxes keep the
    previous exponent.
Prints one line per failed check (at most 5 examples each); exit 1 if any.
"""
import math
import os
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np

BIN, DIR = sys.argv[1], sys.argv[2]
FMTS = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}
EMAX = 63
PREV = 12345
rng = np.random.default_rng(23)
failed = 0


def fail(what, idx, got, want, inputs):
    global failed
    failed += 1
    ex = ", ".join(f"in {inputs[i]!r} ({np.float32(inputs[i]).view(np.uint32):#010x}) got {got[i]:#x} want {want[i]:#x}"
                   for i in idx[:5])
    print(f"FAIL: {what}: {len(idx)} differ, e.g. {ex}")


def run(*args):
    subprocess.run([BIN, *args], check=True)


def encode(name, v):
    v = np.ascontiguousarray(v, dtype=np.float32)
    src, dst = os.path.join(DIR, "in.bin"), os.path.join(DIR, "out.bin")
    v.tofile(src)
    run("enc", name, src, dst)
    return np.fromfile(dst, dtype=np.uint8)


def reference(name, v):
    t, mx = FMTS[name]
    with np.errstate(invalid="ignore"):
        return np.clip(v, -mx, mx).astype(t).view(np.uint8)


def check_encode(name, what, v):
    v = np.asarray(v, dtype=np.float32)
    got, want = encode(name, v), reference(name, v)
    bad = np.nonzero(got != want)[0]
    if len(bad):
        fail(f"{name} encode {what}", bad, got, want, v)
    return got


def values(name):
    """The f32 value of every pattern 0..255 (ml_dtypes' decode)."""
    t, _ = FMTS[name]
    return np.arange(256, dtype=np.uint8).view(t).astype(np.float32)


for name, (t, mx) in FMTS.items():
    # decode: every pattern
    out = os.path.join(DIR, "dec.bin")
    run("dec", name, out)
    got = np.fromfile(out, dtype=np.float32).view(np.uint32)
    want = values(name).view(np.uint32)
    bad = np.nonzero(got != want)[0]
    if len(bad):
        fail(f"{name} decode", bad, got, want, np.arange(256))
    if len(got) != 256:
        print(f"FAIL: {name} decode wrote {len(got)} values")
        failed += 1

    # encode: every pattern's value comes back to its pattern (NaNs to the
    # quiet NaN, e5m2's infinities saturate)
    vals = values(name)
    q = check_encode(name, "the 256 patterns", vals)
    fin = np.isfinite(vals)
    if not np.array_equal(q[fin], np.arange(256, dtype=np.uint8)[fin]):
        print(f"FAIL: {name}: a finite pattern's value does not encode to itself")
        failed += 1

    # ties between neighbouring finite values and their f32 neighbours
    pos = np.unique(vals[np.isfinite(vals) & (vals >= 0)].astype(np.float64))
    mid = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)   # exact: few bits
    assert np.array_equal(mid.astype(np.float64), (pos[:-1] + pos[1:]) / 2)
    ties = np.concatenate([mid, -mid])
    q = check_encode(name, "ties", ties)
    if np.any(q & 1):
        print(f"FAIL: {name}: a tie rounds to an odd pattern")
        failed += 1
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    check_encode(name, "the neighbours of ties", near)

    # saturation: everything at or beyond max becomes +-max
    big = np.array([mx, np.nextafter(np.float32(mx), np.float32(np.inf)), mx * 1.0625, mx * 1.125, mx * 2,
                    1e30, np.finfo(np.float32).max, np.inf], dtype=np.float32)
    big = np.concatenate([big, -big])
    q = check_encode(name, "saturation", big)
    pmax = int(reference(name, np.array([mx], np.float32))[0])
    if not np.array_equal(q, np.array([pmax] * 8 + [pmax | 0x80] * 8, np.uint8)):
        print(f"FAIL: {name}: saturation gives {q}")
        failed += 1

    # NaNs of several payloads, both signs: the quiet NaN with the sign
    nan_bits = np.array([0x7f800001, 0x7fc00000, 0x7fffffff, 0x7fa00000, 0x7f800100, 0x7fe00001], np.uint32)
    nans = np.concatenate([nan_bits, nan_bits | 0x80000000]).view(np.float32)
    q = check_encode(name, "NaN", nans)
    qn = 0x7f if name == "e4m3" else 0x7e
    if not np.array_equal(q, np.array([qn] * 6 + [qn | 0x80] * 6, np.uint8)):
        print(f"FAIL: {name}: NaN gives {q}")
        failed += 1

    # 10^7 random values
    n = 10_000_000
    bits = rng.integers(0, 2**32, size=n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32)
    lo = math.log2(2.0 ** (-12 if name == "e4m3" else -20))
    logu = (2.0 ** rng.uniform(lo, math.log2(mx) + 2, size=n // 2)).astype(np.float32)
    logu *= rng.choice(np.array([-1, 1], np.float32), size=len(logu))
    k = n - len(bits) - len(logu)
    tie_near = ties[rng.integers(0, len(ties), size=k)].view(np.int32) + rng.integers(-3, 4, size=k, dtype=np.int32)
    rand = np.concatenate([bits, logu, tie_near.view(np.float32)])
    assert len(rand) == n
    check_encode(name, "10^7 random values", rand)

    # scale exponents against exact rational arithmetic
    amax = np.concatenate([
        (2.0 ** rng.uniform(-140, 60, size=20000)).astype(np.float32),
        rng.integers(1, 0x7f800000, size=20000, dtype=np.int64).astype(np.uint32).view(np.float32),
        np.float32(mx) * np.array([1, 0.5, 0.25, 2, 4], np.float32),
        np.nextafter(np.float32(mx) * np.array([1, 0.5, 2], np.float32), np.float32(0)),
        np.nextafter(np.float32(mx) * np.array([1, 0.5, 2], np.float32), np.float32(np.inf)),
        np.array([2.0 ** k for k in range(-149, 128)], np.float32),
        np.array([1e-45, 1.4e-45, 3e-39, np.finfo(np.float32).max], np.float32),
    ]).astype(np.float32)
    special = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan], np.float32)
    for margin in (0, 1, 3):
        src, dst = os.path.join(DIR, "amax.bin"), os.path.join(DIR, "exp.bin")
        both = np.concatenate([amax, special])
        both.tofile(src)
        run("exp", name, str(margin), src, dst)
        got = np.fromfile(dst, dtype=np.int32)
        want = []
        for a in amax.astype(np.float64):
            fa, e = Fraction(a), math.frexp(mx)[1] - math.frexp(a)[1]
            while fa * Fraction(2) ** e > mx:
                e -= 1
            while fa * Fraction(2) ** (e + 1) <= mx:
                e += 1
            want.append(min(EMAX, max(-EMAX, e - margin)))
        want += [PREV] * len(special)
        want = np.array(want, np.int64)
        bad = np.nonzero(got != want)[0]
        if len(bad):
            fail(f"{name} scale exponent, margin {margin}", bad, got, want, both)

sys.exit(1 if failed else 0)
