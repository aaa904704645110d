#!/usr/bin/python3
"""fit_vmath.py - the polynomial coefficients of runtime/mp_vmath.h.

Near-minimax fits (Lawson's iteratively reweighted least squares) of the
relative error, in double, then rounded to float. Prints the coefficients
(highest degree first, as Horner's scheme uses them) and the fit's own
error; the error of the float code is what tests/unit/test_vmath.c
measures. Run: /usr/bin/python3 tools/fit_vmath.py
"""
import math
import numpy as np


def lawson(f, basis, lo, hi, deg, rel=True, iters=200, n=4000):
    """Coefficients c minimising max |sum c_i basis_i(x) - f(x)| (/ |f| when rel)."""
    t = np.cos(np.linspace(0, math.pi, n))
    x = lo + (hi - lo) * (t + 1) / 2
    y = np.array([f(v) for v in x])
    A = np.stack([basis(x, i) for i in range(deg + 1)], axis=1)
    s = np.abs(y) if rel else np.ones_like(y)
    A, y = A / s[:, None], y / s
    w = np.ones_like(y) / len(y)
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)
        e = np.abs(A @ c - y)
        w = w * e
        w /= w.sum()
    c32 = c.astype(np.float32).astype(np.float64)
    return c32, (np.max(np.abs(A @ c - y)), np.max(np.abs(A @ c32 - y)))


def show(name, c, err):
    print("%s (max relative error: %.3g in double, %.3g with float coefficients):"
          % (name, err[0], err[1]))
    print("    " + ", ".join("%.9gf" % v for v in c[::-1]))


LN2H = 0.693145751953125
ln2 = math.log(2)
# exp(r) = 1 + r q(r) on |r| <= ln2/2: fit q(r) = (exp(r) - 1) / r
q = lambda r: math.expm1(r) / r if r != 0 else 1.0
c, e = lawson(q, lambda x, i: x ** i, -ln2 / 2, ln2 / 2, 6)
show("exp: q(r), degree 6", c, e)
# erf(x) = x + x P(x^2) on |x| <= 1 (the 1 kept out of P, so that rounding
# 2/sqrt(pi) to float costs nothing); relative to erf(x)/x, i.e. to 1 + P
c, e = lawson(lambda t: math.erf(math.sqrt(t)) / math.sqrt(t) - 1 if t else 2 / math.sqrt(math.pi) - 1,
              lambda t, i: t ** i, 0, 1, 7, rel=False)
show("erf: P(t), t = x^2 <= 1, degree 7 (absolute)", c, e)
# erfc(x) = exp(-x^2) Q(x) on 1 <= x <= 4, in u = x - 2.5 (erf(x) rounds to 1 past 4)
c, e = lawson(lambda u: math.erfc(u + 2.5) * math.exp((u + 2.5) ** 2), lambda u, i: u ** i,
              -1.5, 1.5, 11)
show("erfc: Q(u), u = x - 2.5, degree 11", c, e)
# tanh(x) = x + x t P(t), t = x^2 <= 0.625^2: fit P(t) = (tanh(x)/x - 1) / t
def tq(t):
    if t < 1e-6:
        return -1 / 3 + 2 * t / 15
    x = math.sqrt(t)
    return (math.tanh(x) / x - 1) / t
c, e = lawson(tq, lambda t, i: t ** i, 0, 0.625 ** 2, 5)
show("tanh: P(t), t = x^2 <= 0.390625, degree 5", c, e)
