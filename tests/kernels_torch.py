#!/usr/bin/python3
"""kernels_torch.py - compare the runtime's kernels with PyTorch (and the
f16 conversion with numpy).

    /usr/bin/python3 tests/kernels_torch.py DRIVER [--no-conversions]

DRIVER is tests/kernels_torch.c built against runtime/; each case writes
its inputs to a temporary folder, runs DRIVER on them and compares every
output with torch's forward and autograd results. Exit status 1 if any
comparison fails. f32 comparisons use |got - want| <= 1e-5 |want| +
1e-5 max|want| (the tensor's scale), i.e. about 1e-5 relative."""
import os
import subprocess
import sys
import tempfile

import warnings
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
import rng as rng_port  # noqa: E402  (tests/py/rng.py: the trainers' generator)

torch.set_num_threads(1)
torch.manual_seed(0)
rng = np.random.default_rng(1234)
failures = []


def run(driver, tmp, op, sizes, inputs, nout):
    for i, a in enumerate(inputs):
        np.ascontiguousarray(a).tofile(os.path.join(tmp, "in%d.bin" % i))
    subprocess.run([driver, tmp, op] + [str(s) for s in sizes], check=True)
    outs = []
    for i in range(nout):
        path = os.path.join(tmp, "out%d.bin" % i)
        outs.append(np.fromfile(path, dtype=np.uint16 if op in ("f16", "bf16") and i == 0
                                else np.float32))
        os.remove(path)
    return outs


def check(name, got, want, rtol=1e-5, scale_tol=1e-5):
    want = np.asarray(want, dtype=np.float64).ravel()
    got = np.asarray(got, dtype=np.float64).ravel()
    if got.shape != want.shape:
        failures.append("%s: %d values, want %d" % (name, got.size, want.size))
        print("FAIL", failures[-1])
        return
    tol = rtol * np.abs(want) + scale_tol * (np.abs(want).max() if want.size else 0)
    err = np.abs(got - want)
    bad = ~(err <= tol)
    rel = float((err / (np.abs(want).max() + 1e-30)).max()) if want.size else 0.0
    if bad.any():
        i = int(np.argmax(bad))
        failures.append("%s: %d of %d differ, e.g. [%d] %r vs %r" %
                        (name, int(bad.sum()), want.size, i, got[i], want[i]))
        print("FAIL", failures[-1])
    else:
        print("ok   %-28s max err / max|want| = %.2e" % (name, rel))


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def t(a):
    return torch.from_numpy(np.array(a)).requires_grad_(a.dtype == np.float32)


def grads(out, dy, *inputs):
    out.backward(torch.from_numpy(dy))
    return [x.grad.numpy() for x in inputs]


# ---- f16 / bf16 conversions ------------------------------------------------

def conversion_inputs():
    """a few million f32 values: random bit patterns, the f16 range, every
    f16 value and the halfway points between neighbours, one f32 ulp either
    side of them, and the edges (65504, 65520, subnormals)."""
    bits = rng.integers(0, 2**32, size=1_000_000, dtype=np.uint64).astype(np.uint32)
    parts = [bits.view(np.float32),
             rng.uniform(-70000, 70000, 500_000).astype(np.float32),
             (rng.choice([-1, 1], 500_000) *
              np.exp2(rng.uniform(-30, 17, 500_000))).astype(np.float32)]
    h = np.arange(0, 0x7c00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = ((h[:-1] + h[1:]) / 2).astype(np.float32)
    for m in (mids, -mids):
        parts += [m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(-np.inf))]
    parts.append(np.array([65504, 65519.996, 65520, 65536, 2.0**-24, 2.0**-25, 2.0**-14,
                           2.0**-25 * 1.5, np.inf, -np.inf, np.nan, 0.0, -0.0],
                          dtype=np.float32))
    return np.concatenate(parts)


def case_conversions(driver, tmp):
    x = conversion_inputs()
    nan = np.isnan(x)
    h, back = run(driver, tmp, "f16", [x.size], [x], 2)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    ok = (h == want) | (nan & np.isnan(h.view(np.float16)))
    report("f32->f16 vs numpy (%d values)" % x.size, ok, h, want)
    dec = h.view(np.float16).astype(np.float32)     # numpy's f16 -> f32
    ok = (back.view(np.uint32) == dec.view(np.uint32)) | (nan & np.isnan(back))
    report("f16->f32 vs numpy", ok, back.view(np.uint32), dec.view(np.uint32))
    b, back = run(driver, tmp, "bf16", [x.size], [x], 2)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    bnan = np.isnan((b.astype(np.uint32) << 16).view(np.float32))
    ok = (b == want) | (nan & bnan)
    report("f32->bf16 vs torch (%d values)" % x.size, ok, b, want)
    dec = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16).float().numpy()
    ok = (back.view(np.uint32) == dec.view(np.uint32)) | (nan & np.isnan(back))
    report("bf16->f32 vs torch", ok, back.view(np.uint32), dec.view(np.uint32))


# ---- TF32 (float32_matmul = "tf32") --------------------------------------------

def tf32_reference(x):
    """x (f32) rounded to TF32 to nearest, ties to even, by arithmetic in
    float64 rather than on bits: the spacing of TF32 values at |x| is
    2^(e - 10), e = x's binary exponent (at least -126: subnormals share
    the smallest normal's spacing); np.round rounds halves to even; past
    the largest TF32 value (2^128 - 2^117) a value rounds to infinity."""
    with np.errstate(invalid="ignore"):   # signalling NaNs become quiet
        v = x.astype(np.float64)
    fin = np.isfinite(v)
    _, e = np.frexp(np.where(fin, v, 1.0))          # v = m 2^e, 0.5 <= |m| < 1
    spacing = np.ldexp(1.0, np.maximum(e - 1, -126) - 10)
    q = np.round(np.where(fin, v, 0.0) / spacing) * spacing
    q = np.where(np.abs(q) >= 2.0**128, np.copysign(np.inf, v), q)
    return np.where(fin, np.copysign(q, v), v).astype(np.float32)


def tf32_inputs():
    """10^7 f32 values: random bit patterns (every exponent, subnormals,
    NaN and infinity patterns among them); random high bits with low 13
    bits exactly halfway (0x1000: the ties, either parity) and one below
    and above; random subnormals; values near the largest f32 and TF32;
    zeros, infinities, quiet and signalling NaNs of both signs."""
    def bits(n, lo_mask=0xffffffff, lo=0):
        b = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
        return ((b & ~np.uint32(lo_mask)) | np.uint32(lo)).view(np.float32)
    ties = [bits(1_000_000, 0x1fff, 0x1000 + d) for d in (0, -1, 1)]
    sub = (rng.integers(0, 2**23, 1_000_000, dtype=np.uint64).astype(np.uint32) |
           (rng.integers(0, 2, 1_000_000, dtype=np.uint64).astype(np.uint32) << 31)).view(np.float32)
    top = (np.uint32(0x7f7f0000) + np.arange(0, 0x10000, dtype=np.uint32)).view(np.float32)
    special = np.array([0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                        0x7f800001, 0xff800001, 0x7f801000, 0x7fbfffff, 0x7f7fffff, 0x7f7fe000,
                        0x7f7ff000, 0x7f7fefff, 0x00000001, 0x00001000, 0x00003000, 0x00800000,
                        0x007fffff, 0x3f801000, 0x3f803000], dtype=np.uint32).view(np.float32)
    parts = [bits(4_000_000)] + ties + [sub, -top, top, special,
             rng.uniform(-1e4, 1e4, 1_000_000).astype(np.float32)]
    x = np.concatenate(parts)
    return np.concatenate([x, bits(10_000_000 - x.size)])


def case_tf32(driver, tmp):
    x = tf32_inputs()
    want = tf32_reference(x)
    nan = np.isnan(x)
    for name, got in zip(("mp_round(MP_TF32)", "mp_round_n(MP_TF32)", "the GEMM's packing"),
                         run(driver, tmp, "tf32", [x.size], [x], 3)):
        ok = (got.view(np.uint32) == want.view(np.uint32)) | (nan & np.isnan(got))
        if name.startswith("the GEMM"):     # its sum 0 + (-0) x 1 is +0
            ok |= (got == 0) & (want == 0)
        report("f32->tf32 %s vs nearest-even (%d values)" % (name, x.size), ok,
               got.view(np.uint32), want.view(np.uint32))


def case_linear_tf32(driver, tmp):
    """a product under float32_matmul "tf32" equals the float64 product of
    the operands rounded to TF32 (within f32 summation), and differs from
    the f32 product by more than that (the rounding was done)"""
    M, N, K = 37, 29, 300
    x, w, b = f32(M, K), f32(N, K), f32(N)
    y, y32 = run(driver, tmp, "linear_tf32", [M, N, K], [x, w, b], 2)
    r = lambda a: tf32_reference(a).astype(np.float64)  # noqa: E731
    want = r(x) @ r(w).T + b
    check("linear tf32 vs rounded operands", y, want, 1e-5, 1e-6)
    exact = (x.astype(np.float64) @ w.astype(np.float64).T + b).ravel()
    check("linear without tf32 vs f32", y32, exact, 1e-5, 1e-6)
    if np.abs(y - exact).max() < 100 * np.abs(y32 - exact).max():
        failures.append("linear tf32: no further from the f32 product than f32 rounding")
        print("FAIL", failures[-1])


def report(name, ok, got, want):
    if ok.all():
        print("ok   %s" % name)
        return
    i = int(np.argmin(ok))
    failures.append("%s: %d differ, e.g. [%d] %x vs %x" %
                    (name, int((~ok).sum()), i, got[i], want[i]))
    print("FAIL", failures[-1])


# ---- products ---------------------------------------------------------------

def case_linear(driver, tmp):
    M, N, K = 37, 29, 61
    x, w, b, dy = f32(M, K), f32(N, K), f32(N), f32(M, N)
    tx, tw, tb = t(x), t(w), t(b)
    y = F.linear(tx, tw, tb)
    dx, dw, db = grads(y, dy, tx, tw, tb)
    got = run(driver, tmp, "linear", [M, N, K, 1], [x, w, b, dy], 4)
    for name, g, want in zip(("y", "dx", "dw", "db"), got, (y.detach(), dx, dw, db)):
        check("linear f32 " + name, g, want)
    # f16: inputs rounded to f16, f32 sums, one rounding (numpy reference in
    # double, so allow the one ulp an f32 sum may move a rounding by)
    h = [a.astype(np.float16).astype(np.float64) for a in (x, w, b, dy)]
    got = run(driver, tmp, "linear", [M, N, K, 2], [x, w, b, dy], 4)
    wants = (h[0] @ h[1].T + h[2], h[3] @ h[1], h[3].T @ h[0], h[3].sum(0))
    for name, g, want in zip(("y", "dx", "dw", "db"), got, wants):
        check("linear f16 " + name, g, want.astype(np.float16), 2**-10, 1e-4)
    # bf16 against torch's bf16 linear on the CPU (f32 accumulation)
    got = run(driver, tmp, "linear", [M, N, K, 3], [x, w, b, dy], 4)
    bx, bw, bb = (torch.from_numpy(a).to(torch.bfloat16) for a in (x, w, b))
    check("linear bf16 y vs torch", got[0], F.linear(bx, bw, bb).float().numpy(), 2**-7, 1e-3)


def case_conv2d(driver, tmp):
    # (N, C, H, W, F, kernel, stride, padding, dilation, groups): dense,
    # grouped, depthwise (groups = C, F = C and F = 2 C: the direct kernels),
    # dilated, strided, pairs, and "same" with an even kernel (torch pads one
    # more after than before)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)
    warnings.filterwarnings("ignore", "Using padding='same'")   # a copy on torch's side
    for (N, C, H, W, Fo, k, s, p, d, G) in (
            (2, 3, 9, 8, 5, 3, 2, 1, 1, 1), (3, 4, 12, 12, 6, 5, 1, 0, 1, 1),
            (2, 1, 28, 28, 8, 3, 1, 1, 1, 1), (2, 4, 9, 10, 6, 3, 1, 1, 1, 2),
            (2, 6, 11, 9, 6, 3, 1, 1, 1, 6), (2, 6, 11, 9, 6, 3, 2, 1, 1, 6),
            (2, 4, 10, 10, 8, 5, 1, 2, 1, 4), (2, 4, 12, 11, 8, 3, 1, 2, 2, 4),
            (1, 4, 12, 11, 6, 3, 2, 1, 2, 2), (2, 3, 9, 13, 4, (3, 5), (1, 2), (1, 0), (2, 1), 1),
            (2, 4, 9, 8, 4, (2, 3), 1, "same", 1, 4), (2, 4, 9, 8, 6, 4, 1, "same", (1, 2), 2),
            (1, 3, 7, 8, 5, (3, 4), 1, "same", 2, 1)):
        (kh, kw), (sh, sw), (dh, dw) = pair(k), pair(s), pair(d)
        x, w, b = f32(N, C, H, W), f32(Fo, C // G, kh, kw), f32(Fo)
        # the reference in float64, so 1e-6 measures this side's error alone
        tx, tw, tb = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (x, w, b))
        y = F.conv2d(tx, tw, tb, stride=s, padding=p, dilation=d, groups=G)
        if p == "same":     # torch: d (k - 1) split, the odd one after
            ph, pw = dh * (kh - 1) // 2, dw * (kw - 1) // 2
        else:
            ph, pw = pair(p)
        dy = f32(*y.shape)
        dx, dw_, db = grads(y, dy.astype(np.float64), tx, tw, tb)
        sizes = [N, C, H, W, Fo, kh, kw, sh, sw, ph, pw, dh, dw, G, y.shape[2], y.shape[3]]
        got = run(driver, tmp, "conv2d", sizes, [x, w, b, dy], 4)
        tag = "conv2d k%s s%s p%s d%s g%d " % (k, s, p, d, G)
        for name, g, want in zip(("y", "dx", "dw", "db"), got, (y.detach(), dx, dw_, db)):
            check(tag + name, g, want, 1e-6, 1e-6)


def case_pools(driver, tmp):
    # padding (ResNet's stem: 3, 2, 1) and avg_pool2d's count_include_pad
    for (N, C, H, W, k, s, p, incl) in ((2, 3, 9, 8, 3, 2, 0, 1), (2, 2, 8, 8, 2, 2, 0, 1),
                                        (1, 2, 7, 9, 2, 1, 0, 1), (2, 3, 9, 8, 3, 2, 1, 1),
                                        (2, 3, 9, 8, 3, 2, 1, 0), (1, 2, 8, 7, 5, 1, 2, 0),
                                        (2, 2, 8, 9, 4, 3, 2, 1)):
        x = f32(N, C, H, W)
        x[0, 0, :2, :2] = 0.5               # a tie: the first maximum takes it
        for is_max in (1, 0):
            tx = t(x)
            if is_max:
                y = F.max_pool2d(tx, k, s, p)
            else:
                y = F.avg_pool2d(tx, k, s, p, count_include_pad=bool(incl))
            dy = f32(*y.shape)
            (dx,) = grads(y, dy, tx)
            got = run(driver, tmp, "pool", [N, C, H, W, k, s, is_max, p, incl], [x, dy], 2)
            tag = "%s_pool2d k%d s%d p%d%s " % ("max" if is_max else "avg", k, s, p,
                                                "" if incl or is_max else " excl")
            check(tag + "y", got[0], y.detach())
            check(tag + "dx", got[1], dx)
    N, C, H, W = 3, 4, 5, 6
    x = f32(N, C, H, W)
    tx = t(x)
    y = tx.mean(dim=(2, 3))
    dy = f32(N, C)
    (dx,) = grads(y, dy, tx)
    got = run(driver, tmp, "gap", [N, C, H * W], [x, dy], 2)
    check("global_avg_pool y", got[0], y.detach())
    check("global_avg_pool dx", got[1], dx)


# ---- normalisation ----------------------------------------------------------

def case_layer_norm(driver, tmp):
    R, D = 10, 48
    x, w, b, dy = f32(R, D, lo=-3, hi=4), f32(D, lo=0.5, hi=1.5), f32(D), f32(R, D)
    tx, tw, tb = t(x), t(w), t(b)
    y = F.layer_norm(tx, (D,), tw, tb, 1e-5)
    dx, dw, db = grads(y, dy, tx, tw, tb)
    got = run(driver, tmp, "layer_norm", [R, D], [x, w, b, dy], 4)
    for name, g, want in zip(("y", "dx", "dw", "db"), got, (y.detach(), dx, dw, db)):
        check("layer_norm " + name, g, want)


def case_batch_norm(driver, tmp):
    for shape in ((4, 3, 5, 6), (16, 7)):
        C = shape[1]
        S = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        x, w, b, dy = f32(*shape, lo=-2, hi=3), f32(C, lo=0.5, hi=1.5), f32(C), f32(*shape)
        rm, rv = f32(C), f32(C, lo=0.5, hi=2)
        bn = (torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d)(
            C, eps=1e-5, momentum=0.1)
        with torch.no_grad():
            bn.weight.copy_(torch.from_numpy(w))
            bn.bias.copy_(torch.from_numpy(b))
            bn.running_mean.copy_(torch.from_numpy(rm))
            bn.running_var.copy_(torch.from_numpy(rv))
        tx = t(x)
        bn.train()
        y = bn(tx)
        dx, dw, db = grads(y, dy, tx, bn.weight, bn.bias)
        bn.eval()
        ye = bn(torch.from_numpy(x)).detach()
        got = run(driver, tmp, "batch_norm", [shape[0], C, S], [x, w, b, dy, rm, rv], 7)
        tag = "batch_norm %dd " % (len(shape) - 2 if len(shape) > 2 else 1)
        wants = (y.detach(), dx, dw, db, bn.running_mean, bn.running_var, ye)
        for name, g, want in zip(("y", "dx", "dw", "db", "running_mean", "running_var",
                                  "y eval"), got, wants):
            check(tag + name, g, want)


# ---- softmax, losses, activations -------------------------------------------

def case_softmax(driver, tmp):
    for (o, l, inner) in ((3, 7, 5), (6, 40, 1)):
        x, dy = f32(o, l, inner, lo=-4, hi=4), f32(o, l, inner)
        for log in (0, 1):
            tx = t(x)
            y = (F.log_softmax if log else F.softmax)(tx, dim=1)
            (dx,) = grads(y, dy, tx)
            got = run(driver, tmp, "softmax", [o, l, inner, log], [x, dy], 2)
            tag = "%ssoftmax [%d,%d,%d] axis 1 " % ("log_" if log else "", o, l, inner)
            check(tag + "y", got[0], y.detach())
            check(tag + "dx", got[1], dx)


def case_losses(driver, tmp):
    B, T, C = 4, 5, 11
    x = f32(B, T, C, lo=-4, hi=4)
    labels = rng.integers(0, C, size=(B, T)).astype(np.int32)
    dl = np.array([0.75], dtype=np.float32)
    tx = t(x)
    loss = F.cross_entropy(tx.view(-1, C), torch.from_numpy(labels).long().view(-1))
    (dx,) = grads(loss, dl.reshape(()), tx)
    got = run(driver, tmp, "cross_entropy", [B * T, C], [x, labels, dl], 3)
    check("cross_entropy loss", got[0], loss.detach())
    check("cross_entropy dx", got[1], dx)
    acc = (x.reshape(-1, C).argmax(1) == labels.ravel()).mean()
    check("accuracy", got[2], acc)
    n = 300
    p, tg = f32(n), f32(n)
    tp = t(p)
    loss = F.mse_loss(tp, torch.from_numpy(tg))
    (dp,) = grads(loss, dl.reshape(()), tp)
    got = run(driver, tmp, "mse", [n], [p, tg, dl], 2)
    check("mse loss", got[0], loss.detach())
    check("mse dpred", got[1], dp)


def case_activations(driver, tmp):
    n = 2000
    x, dy = f32(n, lo=-6, hi=6), f32(n)
    got = run(driver, tmp, "activations", [n], [x, dy], 8)
    for i, (name, fn) in enumerate((("gelu", F.gelu), ("silu", F.silu),
                                    ("sigmoid", torch.sigmoid), ("tanh", torch.tanh))):
        tx = t(x)
        y = fn(tx)
        (dx,) = grads(y, dy, tx)
        check(name + " y", got[2 * i], y.detach())
        check(name + " dx", got[2 * i + 1], dx)


def case_attention(driver, tmp):
    # (B, H, T, T', D): one tile; T past a query tile (32) and a key tile (64),
    # a multiple of neither, at D 16 and 64; cross attention (T != T')
    for B, H, T, Tk, D in ((2, 3, 9, 9, 8), (1, 2, 100, 100, 16), (2, 1, 70, 70, 64),
                           (1, 2, 33, 80, 64)):
        for causal in ((0, 1) if T == Tk else (0,)):
            q, k, v, dy = f32(B, H, T, D), f32(B, H, Tk, D), f32(B, H, Tk, D), f32(B, H, T, D)
            tq, tk, tv = t(q), t(k), t(v)
            s = tq @ tk.transpose(-1, -2) / np.sqrt(D)
            if causal:
                s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -np.inf)
            y = F.softmax(s, dim=-1) @ tv
            dq, dk, dv = grads(y, dy, tq, tk, tv)
            got = run(driver, tmp, "attention", [B * H, T, Tk, D, causal], [q, k, v, dy], 4)
            tag = "attention T %d T' %d D %d%s " % (T, Tk, D, " causal" if causal else "")
            for name, g, want in zip(("y", "dq", "dk", "dv"), got, (y.detach(), dq, dk, dv)):
                check(tag + name, g, want)


def case_attention_opt(driver, tmp):
    # the mask (u8: 1 = attend; f32: added to the scores) broadcast from
    # key padding [B, 1, 1, T'], per head [1, H, T, T'] and full shapes,
    # with a scale, causal and not, across key and query tiles; rows that
    # see no key (every key padded, or masked with -inf) give zeros and
    # zero gradients (torch's explicit softmax gives NaN there: the
    # reference zeros those rows)
    for B, H, T, Tk, D, causal, u8, ms in (
            (2, 3, 9, 9, 8, 0, 1, (2, 1, 1, 9)), (2, 3, 9, 9, 8, 1, 1, (2, 1, 1, 9)),
            (1, 2, 100, 100, 16, 0, 0, (1, 2, 100, 100)), (2, 2, 70, 70, 16, 1, 0, (1, 2, 70, 70)),
            (1, 2, 33, 80, 64, 0, 1, (1, 1, 33, 80)), (2, 1, 40, 90, 16, 0, 0, (2, 1, 1, 90))):
        q, k, v, dy = f32(B, H, T, D), f32(B, H, Tk, D), f32(B, H, Tk, D), f32(B, H, T, D)
        scale = np.array([rng.uniform(0.1, 1.0)], dtype=np.float32)
        if u8:
            m = (rng.uniform(size=ms) < 0.7).astype(np.float32)
            if ms[0] > 1:
                m[0] = 0                                       # batch 0's keys all padded
            if ms[2] != 1:
                m[..., 3, :] = 0                               # one query sees nothing
            bias = torch.from_numpy(np.where(m != 0, 0.0, -np.inf).astype(np.float32))
        else:
            m = f32(*ms, lo=-2.0, hi=2.0)
            if ms[2] > 1:
                m[..., 5, :] = -np.inf                         # a row sees nothing
            if ms[0] > 1:
                m[0] = -np.inf                                 # nor does batch 0
            m[..., :, 2] = -np.inf                             # a key nobody sees
            bias = torch.from_numpy(m)
        tq, tk, tv = t(q), t(k), t(v)
        s = tq @ tk.transpose(-1, -2) * float(scale[0]) + bias
        if causal:
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -np.inf)
        dead = torch.isinf(s).all(-1, keepdim=True)
        y = torch.where(dead, torch.zeros(()), F.softmax(s.masked_fill(dead, 0.0), dim=-1)) @ tv
        dq, dk, dv = grads(y, dy, tq, tk, tv)
        got = run(driver, tmp, "attention_opt", [B, H, T, Tk, D, causal, u8] + list(ms),
                  [q, k, v, dy, m, scale], 4)
        tag = "attention_opt T %d T' %d D %d%s %s mask %s " % (
            T, Tk, D, " causal" if causal else "", "u8" if u8 else "f32", list(ms))
        for name, g, want in zip(("y", "dq", "dk", "dv"), got, (y.detach(), dq, dk, dv)):
            check(tag + name, g, want)


def dropout_keep(seed, step, micro, node, n, p):
    """the dropout mask of the trainer's generator (tests/py/rng.py, an
    independent implementation of it): element i is kept iff its uniform
    (24 bits) >= p (as f32)"""
    return rng_port.rand(seed, step, micro, node, n) >= np.float32(p)


def case_attention_drop(driver, tmp):
    # dropout on the probabilities (training): y = (P o M / (1 - p)) v, P the
    # softmax of the un-dropped scores, M element (b H + h) T T' + i T' + j of
    # the generator's stream of (seed, step, micro, node), here drawn by
    # tests/py/rng.py; the float64 reference softmax(q k^T / sqrt(D)) o M /
    # (1 - p) v and its autograd gradients. Across query and key tiles,
    # causal and not, cross attention.
    seed, step, micro, node = 1234567, 5, 1, 17
    for B, H, T, Tk, D, causal, p in ((2, 3, 9, 9, 8, 0, 0.3), (1, 2, 100, 100, 16, 1, 0.3),
                                       (1, 2, 33, 80, 64, 0, 0.5), (2, 1, 70, 70, 16, 1, 0.1)):
        q, k, v, dy = f32(B, H, T, D), f32(B, H, Tk, D), f32(B, H, Tk, D), f32(B, H, T, D)
        keep = dropout_keep(seed, step, micro, node, B * H * T * Tk, p).reshape(B, H, T, Tk)
        tq, tk, tv = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (q, k, v))
        s = tq @ tk.transpose(-1, -2) / np.sqrt(D)
        if causal:
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -np.inf)
        y = (F.softmax(s, dim=-1) * torch.from_numpy(keep) / (1 - float(np.float32(p)))) @ tv
        dq, dk, dv = grads(y, dy.astype(np.float64), tq, tk, tv)
        got = run(driver, tmp, "attention_drop",
                  [B, H, T, Tk, D, causal, round(p * 1e6), seed, step, micro, node],
                  [q, k, v, dy], 4)
        tag = "attention_drop T %d T' %d D %d%s p %g " % (T, Tk, D, " causal" if causal else "", p)
        for name, g, want in zip(("y", "dq", "dk", "dv"), got, (y.detach(), dq, dk, dv)):
            check(tag + name, g, want)
    # The kernel's own mask, seen through v = I (y = P o M / (1 - p)): zeros
    # exactly where it drops, the fraction dropped p within 4.5 binomial
    # standard deviations, survivors P / (1 - p); another step draws another
    # mask (about 2 p (1 - p) of the bits differ).
    B, H, T, p = 2, 2, 64, 0.3
    q, k = f32(B, H, T, T), f32(B, H, T, T)
    v = np.broadcast_to(np.eye(T, dtype=np.float32), (B, H, T, T)).copy()
    ys = []
    for st in (step, step + 1):
        ys.append(run(driver, tmp, "attention_drop",
                      [B, H, T, T, T, 0, round(p * 1e6), seed, st, micro, node],
                      [q, k, v, q], 4)[0].reshape(B, H, T, T))
    P = F.softmax(torch.from_numpy(q.astype(np.float64)) @
                  torch.from_numpy(k.astype(np.float64)).transpose(-1, -2) / np.sqrt(T), dim=-1).numpy()
    dropped = ys[0] == 0
    n = dropped.size
    frac, sd = dropped.mean(), np.sqrt(p * (1 - p) / n)
    if abs(frac - p) > 4.5 * sd:
        failures.append("attention_drop: %.4f of %d dropped, want %.2f +- %.4f" % (frac, n, p, 4.5 * sd))
        print("FAIL", failures[-1])
    else:
        print("ok   attention_drop fraction dropped %.4f (p %.2f, %d draws)" % (frac, p, n))
    check("attention_drop survivors", ys[0][~dropped], P[~dropped] / (1 - float(np.float32(p))))
    want = dropout_keep(seed, step, micro, node, n, p).reshape(dropped.shape)
    if not np.array_equal(~dropped, want):
        failures.append("attention_drop: %d mask bits differ from tests/py/rng.py's" %
                        int((~dropped != want).sum()))
        print("FAIL", failures[-1])
    diff = ((ys[1] == 0) != dropped).mean()
    if abs(diff - 2 * p * (1 - p)) > 4.5 * np.sqrt(2 * p * (1 - p) * (1 - 2 * p * (1 - p)) / n):
        failures.append("attention_drop: steps %d and %d share %.3f of their mask" % (step, step + 1, 1 - diff))
        print("FAIL", failures[-1])
    else:
        print("ok   attention_drop next step's mask differs in %.3f" % diff)


def case_embedding(driver, tmp):
    n, V, D = 30, 7, 5
    ids = rng.integers(0, V, size=n).astype(np.int32)
    w, dy = f32(V, D), f32(n, D)
    tw = t(w)
    y = F.embedding(torch.from_numpy(ids).long(), tw)
    (dw,) = grads(y, dy, tw)
    got = run(driver, tmp, "embedding", [n, V, D], [ids, w, dy], 2)
    check("embedding y", got[0], y.detach())
    check("embedding dw", got[1], dw)

# ---- elementwise, norm, rope and loss additions ------------------------------

def case_elementwise2(driver, tmp):
    n = 2000
    x, dy = f32(n, lo=-3, hi=3), f32(n)
    b = f32(n, lo=-3, hi=3)
    b[::7] = x[::7]                            # ties: the gradient is split
    x[::50] = -0.5                             # clamp's bounds pass the gradient
    x[1::50] = 0.75
    xp = f32(n, lo=0.1, hi=3)
    got = run(driver, tmp, "elementwise2", [n], [x, b, dy, xp], 20)
    unary = (("abs", torch.abs), ("sin", torch.sin), ("cos", torch.cos),
             ("gelu tanh", lambda v: F.gelu(v, approximate="tanh")))
    for i, (name, fn) in enumerate(unary):
        tx = t(x)
        y = fn(tx)
        (dx,) = grads(y, dy, tx)
        check(name + " y", got[2 * i], y.detach())
        check(name + " dx", got[2 * i + 1], dx)
    for k, (name, fn) in ((8, ("maximum", torch.maximum)), (11, ("minimum", torch.minimum))):
        tx, tb = t(x), t(b)
        y = fn(tx, tb)
        dx, db = grads(y, dy, tx, tb)
        check(name + " y", got[k], y.detach())
        check(name + " da", got[k + 1], dx)
        check(name + " db", got[k + 2], db)
    for k, src, fn, name in ((14, x, lambda v: torch.clamp(v, -0.5, 0.75), "clamp"),
                             (16, xp, lambda v: torch.pow(v, 2.5), "pow 2.5"),
                             (18, x, lambda v: torch.pow(v, 3.0), "pow 3")):
        tx = t(src)
        y = fn(tx)
        (dx,) = grads(y, dy, tx)
        check(name + " y", got[k], y.detach())
        check(name + " dx", got[k + 1], dx, rtol=1e-5 if k != 16 else 3e-5)


def case_rms_norm(driver, tmp):
    R, D = 12, 40
    x, w, dy = f32(R, D, lo=-2, hi=2), f32(D, lo=0.5, hi=1.5), f32(R, D)
    tx, tw = t(x), t(w)
    # torch.nn.RMSNorm's definition (the module itself is newer than this torch)
    y = tx * torch.rsqrt(tx.pow(2).mean(-1, keepdim=True) + 1e-5) * tw
    dx, dw = grads(y, dy, tx, tw)
    got = run(driver, tmp, "rms_norm", [R, D], [x, w, dy], 5)
    for name, g, want in zip(("y", "dx", "dw"), got, (y.detach(), dx, dw)):
        check("rms_norm " + name, g, want)
    tx, tw = t(x), t(w)
    y = F.layer_norm(tx, (D,), tw, None, 1e-5)     # LayerNorm(bias=False)
    (dx,) = grads(y, dy, tx)
    check("layer_norm no bias y", got[3], y.detach())
    check("layer_norm no bias dx", got[4], dx)


def rope_ref(x, half, theta):
    """x [B, T, H, D] rotated by position along T, in float64: llama2.c's
    interleaved pairs or Hugging Face's rotate_half."""
    T, D = x.shape[1], x.shape[3]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]     # [T, D/2]
    cos, sin = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    if half:
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def case_rope(driver, tmp):
    B, T, H, D = 2, 37, 3, 16
    for half in (0, 1):
        for theta in (10000, 500):
            x, dy = f32(B, T, H, D), f32(B, T, H, D)
            tx = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
            y = rope_ref(tx, half, theta)
            y.backward(torch.from_numpy(dy.astype(np.float64)))
            got = run(driver, tmp, "rope", [B, T, H, D, half, theta], [x, dy], 2)
            tag = "rope %s theta %d " % ("half" if half else "interleaved", theta)
            # the angle p theta^(-2i/D) is an f32 product, as llama2.c's
            check(tag + "y", got[0], y.detach(), rtol=1e-5, scale_tol=2e-5)
            check(tag + "dx", got[1], tx.grad, rtol=1e-5, scale_tol=2e-5)


def case_cross_entropy2(driver, tmp):
    R, C = 40, 9
    for ignore, eps, u8 in ((-100, 0.0, 0), (3, 0.0, 1), (None, 0.1, 0), (0, 0.25, 1), (-1, 0.3, 1)):
        x = f32(R, C, lo=-4, hi=4)
        labels = rng.integers(0, C, size=R).astype(np.int32)
        if ignore is not None and ignore < 0 and not u8:
            labels[::3] = ignore
        dl = np.array([0.75], dtype=np.float32)
        tx = t(x)
        lab = torch.from_numpy(labels).long()
        kw = {"label_smoothing": eps}
        if ignore is not None and not (u8 and ignore < 0):   # u8 never holds a negative
            kw["ignore_index"] = ignore
        loss = F.cross_entropy(tx, lab, **kw)
        (dx,) = grads(loss, dl.reshape(()), tx)
        args = [R, C, int(ignore is not None), ignore if ignore is not None else 0, u8]
        got = run(driver, tmp, "cross_entropy2", args, [x, labels, dl, np.float32([eps])], 3)
        tag = "cross_entropy ignore %s eps %g%s " % (ignore, eps, " u8" if u8 else "")
        check(tag + "loss", got[0], loss.detach())
        check(tag + "dx", got[1], dx)
        check(tag + "accuracy", got[2], (x.argmax(1) == labels).mean())


def case_select(driver, tmp):
    R, C = 30, 17
    a, b, dy, c = f32(R, C, lo=-2, hi=2), f32(C, lo=-2, hi=2), f32(R, C), f32(R, 1)
    a[::4, 3] = b[3]                           # ties: ==, <=, >= hold there
    a[1, :] = b
    got = run(driver, tmp, "select", [R, C], [a, b, dy, c], 9)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for k, (name, fn) in enumerate((("gt", torch.gt), ("lt", torch.lt), ("ge", torch.ge),
                                    ("le", torch.le), ("eq", torch.eq), ("ne", torch.ne))):
        check(name, got[k], fn(ta, tb).float())
    ga, gb = t(a), t(b)
    y = torch.where(torch.from_numpy(c) > 0, ga, gb)
    da, db = grads(y, dy, ga, gb)
    check("where y", got[6], y.detach())
    check("where da", got[7], da)
    check("where db (summed to [C])", got[8], db)


def case_extremum(driver, tmp):
    for O, L, I in ((3, 7, 5), (4, 33, 1), (1, 6, 9)):
        x, dy = f32(O, L, I, lo=-2, hi=2), f32(O, I)
        x[:, 4 % L, :] = x[:, 1, :]            # ties: the first position wins
        x[0, 2, 0] = np.nan                    # a NaN wins, as torch
        got = run(driver, tmp, "extremum", [O, L, I], [x, dy], 6)
        for k, (name, fn) in ((0, ("max", torch.max)), (3, ("min", torch.min))):
            tx = t(x)
            y, at = fn(tx, 1)
            (dx,) = grads(y, dy, tx)
            tag = "%s [%d, %d, %d] " % (name, O, L, I)
            check(tag + "y", np.nan_to_num(got[k], nan=9.0), np.nan_to_num(y.detach(), nan=9.0))
            check(tag + "index", got[k + 1], at)
            check(tag + "dx", got[k + 2], dx)


def case_route(driver, tmp):
    for O, L, I, K, G, J in ((3, 7, 5, 2, 4, 4), (4, 33, 1, 5, 9, 1), (2, 8, 3, 8, 3, 3)):
        x, dy = f32(O, L, I, lo=-2, hi=2), f32(O, K, I)
        x[:, 5 % L, :] = x[:, 1, :]                    # ties: the lower position first
        x[:, 6 % L, 0] = x[:, 2, 0]
        x[0, 3, 0] = np.nan                            # NaN is the largest, as torch
        ids = rng.integers(0, L, size=(O, I)).astype(np.int32)
        ids[0, 0] = L                                  # out of range: a row of zeros
        gi = rng.integers(0, L, size=(O, G, J)).astype(np.int32)
        gi[:, 0, :] = gi[:, -1, :]                     # repeats: the gradient adds up
        dz = f32(O, G, J)
        got = run(driver, tmp, "route", [O, L, I, K, G, J], [x, dy, ids, gi, dz], 8)
        tag = "route [%d, %d, %d] k %d " % (O, L, I, K)
        # torch.topk orders ties as its partial sort leaves them; the spec
        # says lower index first: a stable descending sort (NaN first, as
        # topk) gives that order, and topk's values must agree with it
        tx = t(x)
        at = torch.sort(tx.detach(), dim=1, descending=True, stable=True).indices[:, :K]
        v = torch.gather(tx, 1, at)
        (dx,) = grads(v, dy, tx)
        nan9 = lambda a: np.nan_to_num(np.asarray(a, dtype=np.float64), nan=9.0)
        check(tag + "topk = torch.topk's values", nan9(v.detach()), nan9(torch.topk(t(x), K, 1).values.detach()))
        check(tag + "topk indices", got[0], at)
        check(tag + "topk values", nan9(got[1]), nan9(v.detach()))
        check(tag + "topk dx", got[2], dx)
        cs = torch.from_numpy(x)
        check(tag + "cumsum", nan9(got[3]), nan9(torch.cumsum(cs, 1)))
        check(tag + "cumsum from the end", nan9(got[4]), nan9(torch.flip(torch.cumsum(torch.flip(cs, [1]), 1), [1])))
        oh = F.one_hot(torch.from_numpy(np.clip(ids, 0, L - 1)).long(), L).numpy()
        oh[0, 0, :] = 0
        check(tag + "one_hot", got[5], oh)
        tx = t(x)
        g = torch.gather(tx, 1, torch.from_numpy(gi).long())
        (dx,) = grads(g, dz, tx)
        check(tag + "gather", nan9(got[6]), nan9(g.detach()))
        check(tag + "gather dx", got[7], dx)
def case_rnn(driver, tmp):
    """gru and lstm against torch.nn.GRU / nn.LSTM (batch_first) with the same
    weights: out, the final states and every gradient, from d out and d of
    the final states"""
    for lstm in (0, 1):
        for B, T, I, H, bias in ((3, 7, 5, 4, 1), (2, 1, 3, 6, 1), (4, 12, 8, 16, 0)):
            G = (4 if lstm else 3) * H
            k = 1 / np.sqrt(H)
            x, dout, dh, dc = f32(B, T, I), f32(B, T, H), f32(B, H), f32(B, H)
            wih, whh = f32(G, I, lo=-k, hi=k), f32(G, H, lo=-k, hi=k)
            bih, bhh = f32(G, lo=-k, hi=k), f32(G, lo=-k, hi=k)
            got = run(driver, tmp, "rnn", [B, T, I, H, lstm, bias],
                      [x, wih, whh, bih, bhh, dout, dh, dc], 8)
            m = (torch.nn.LSTM if lstm else torch.nn.GRU)(I, H, batch_first=True, bias=bool(bias))
            with torch.no_grad():
                m.weight_ih_l0.copy_(torch.from_numpy(wih))
                m.weight_hh_l0.copy_(torch.from_numpy(whh))
                if bias:
                    m.bias_ih_l0.copy_(torch.from_numpy(bih))
                    m.bias_hh_l0.copy_(torch.from_numpy(bhh))
            tx = t(x)
            out, st = m(tx)
            hn, cn = st if lstm else (st, None)
            loss = (out * torch.from_numpy(dout)).sum() + (hn[0] * torch.from_numpy(dh)).sum()
            if lstm:
                loss = loss + (cn[0] * torch.from_numpy(dc)).sum()
            loss.backward()
            tag = "%s [%d, %d, %d] H %d%s " % ("lstm" if lstm else "gru", B, T, I, H,
                                               "" if bias else " no bias")
            check(tag + "out", got[0], out.detach())
            check(tag + "h_n", got[1], hn.detach())
            if lstm:
                check(tag + "c_n", got[2], cn.detach())
            check(tag + "dx", got[3], tx.grad)
            check(tag + "dweight_ih", got[4], m.weight_ih_l0.grad)
            check(tag + "dweight_hh", got[5], m.weight_hh_l0.grad)
            if bias:
                check(tag + "dbias_ih", got[6], m.bias_ih_l0.grad)
                check(tag + "dbias_hh", got[7], m.bias_hh_l0.grad)
def case_conv_transpose2d(driver, tmp):
    # (N, Cin, H, W, Cout, kernel, stride, padding, output_padding, groups):
    # plain, strided with output_padding, grouped, depthwise (groups = Cin =
    # Cout: the direct kernels; and a multiplier), pairs
    pair = lambda v: v if isinstance(v, tuple) else (v, v)
    for (N, C, H, W, Fo, k, s, p, op, G) in (
            (2, 3, 5, 4, 4, 3, 1, 0, 0, 1), (2, 4, 5, 6, 3, 3, 2, 1, 1, 1),
            (2, 4, 4, 4, 6, 4, 2, 1, 0, 2), (2, 6, 5, 5, 6, 3, 2, 1, 1, 6),
            (1, 4, 6, 5, 8, 3, 1, 1, 0, 4), (2, 4, 5, 3, 4, 2, 2, 0, 0, 1),
            (2, 3, 4, 5, 5, (3, 2), (2, 3), (1, 0), (1, 2), 1)):
        (kh, kw), (sh, sw), (ph, pw), (oh, ow) = pair(k), pair(s), pair(p), pair(op)
        x, w, b = f32(N, C, H, W), f32(C, Fo // G, kh, kw), f32(Fo)
        tx, tw, tb = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (x, w, b))
        y = F.conv_transpose2d(tx, tw, tb, stride=s, padding=p, output_padding=op, groups=G)
        dy = f32(*y.shape)
        dx, dw_, db = grads(y, dy.astype(np.float64), tx, tw, tb)
        sizes = [N, C, H, W, Fo, kh, kw, sh, sw, ph, pw, oh, ow, G, y.shape[2], y.shape[3]]
        got = run(driver, tmp, "conv_transpose2d", sizes, [x, w, b, dy], 4)
        tag = "conv_transpose2d k%s s%s p%s op%s g%d " % (k, s, p, op, G)
        for name, g, want in zip(("y", "dx", "dw", "db"), got, (y.detach(), dx, dw_, db)):
            check(tag + name, g, want, 1e-6, 1e-6)


def case_pad(driver, tmp):
    # F.pad's constant mode: last axis first, negative entries crop, a value,
    # ranks below and above four (the leading axes as one); reflect,
    # replicate and circular on 1 to 3 axes, pads up to the limits (reflect
    # < size, circular <= size), an axis of one (replicate)
    modes = ["constant", "reflect", "replicate", "circular"]
    for shape, lst, value4, mode in (((2, 3, 5, 4), (1, 2), 0, 0), ((2, 3, 5, 4), (1, 2, -1, 3, 0, 1), 2, 0),
                                     ((3, 7), (-2, 1), -3, 0), ((2, 2, 3, 4, 5), (0, 1, 2, 0, -1, 1, 1, 1), 1, 0),
                                     ((4, 6), (2, 3, 1, 0), 0, 0),
                                     ((2, 3, 5, 4), (3, 2, 1, 4), 0, 1), ((2, 7), (6, 1), 0, 1),
                                     ((2, 3, 4, 5, 3), (2, 1, 0, 3, 3, 2), 0, 1),
                                     ((2, 3, 5, 4), (5, 2, 1, 3), 0, 2), ((3, 1, 6), (2, 3), 0, 2),
                                     ((2, 2, 3, 4, 5), (1, 4, 2, 0, 3, 1), 0, 2),
                                     ((2, 3, 5, 4), (4, 1, 5, 2), 0, 3), ((2, 2, 6), (1, 6), 0, 3),
                                     ((1, 2, 3, 4, 5), (5, 5, 0, 4, 3, 1), 0, 3)):
        x = f32(*shape)
        tx = t(x)
        if mode:
            y = F.pad(tx, lst, mode=modes[mode])
        else:
            y = F.pad(tx, lst, value=value4 / 4)
        dy = f32(*y.shape)
        (dx,) = grads(y, dy, tx)
        r = len(shape)
        outer = int(np.prod(shape[:max(0, r - 4)]))
        xs = [1] * max(0, 4 - r) + list(shape[-4:])
        ys = [1] * max(0, 4 - r) + list(y.shape[-4:])
        full = list(lst) + [0] * (8 - len(lst))
        before = [full[2 * (3 - q)] for q in range(4)]
        got = run(driver, tmp, "pad", [outer] + xs + ys + before + [value4, mode], [x, dy], 2)
        tag = "pad %s %s %s " % (modes[mode], shape, lst)
        check(tag + "y", got[0], y.detach(), 0, 0)
        if mode:   # sums of a few dy values, in another order than torch's
            check(tag + "dx", got[1], dx, 1e-6, 1e-6)
        else:
            check(tag + "dx", got[1], dx, 0, 0)


def case_upsample(driver, tmp):
    # F.interpolate with an integer scale factor: nearest, bilinear
    # (align_corners false and true: "corners"), a pair of scales, an edge
    # of one pixel, a scale of 1 on one axis
    for (N, C, H, W, sh, sw, mode) in ((2, 3, 4, 5, 2, 2, "nearest"), (1, 2, 3, 4, 3, 2, "nearest"),
                                       (2, 3, 4, 5, 2, 2, "bilinear"), (1, 2, 5, 3, 3, 4, "bilinear"),
                                       (2, 2, 1, 4, 2, 3, "bilinear"), (1, 1, 6, 6, 5, 5, "bilinear"),
                                       (2, 3, 4, 5, 2, 2, "corners"), (1, 2, 5, 3, 3, 4, "corners"),
                                       (2, 2, 1, 4, 2, 3, "corners"), (1, 1, 7, 6, 5, 1, "corners"),
                                       (1, 2, 9, 13, 4, 3, "corners")):
        x = f32(N, C, H, W)
        tx = torch.from_numpy(x).requires_grad_()
        kw = {} if mode == "nearest" else {"align_corners": mode == "corners"}
        y = F.interpolate(tx, scale_factor=(sh, sw), mode="nearest" if mode == "nearest" else "bilinear", **kw)
        dy = f32(*y.shape)
        (dx,) = grads(y, dy, tx)
        got = run(driver, tmp, "upsample", [N * C, H, W, sh, sw, ["nearest", "bilinear", "corners"].index(mode)],
                  [x, dy], 2)
        tag = "upsample %s %dx%d " % (mode, sh, sw)
        check(tag + "y", got[0], y.detach(), 1e-6, 1e-6)
        check(tag + "dx", got[1], dx, 1e-6, 1e-6)


def case_group_norm(driver, tmp):
    # nn.GroupNorm: NCHW, [N, C, L], one group (layer norm over C, H, W), one
    # channel per group (instance norm), an offset that a one-pass variance
    # would lose
    for (shape, G) in (((2, 6, 4, 5), 3), ((3, 4, 7), 2), ((2, 4, 3, 3), 1), ((2, 6, 5, 4), 6),
                       ((1, 8, 16), 4)):
        x, w, b = f32(*shape), f32(shape[1]), f32(shape[1])
        if G == 6:
            x += 20.0
        tx, tw, tb = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (x, w, b))
        y = F.group_norm(tx, G, tw, tb, eps=1e-5)
        dy = f32(*y.shape)
        dx, dw_, db = grads(y, dy.astype(np.float64), tx, tw, tb)
        S = int(np.prod(shape[2:]))
        got = run(driver, tmp, "group_norm", [shape[0], shape[1], S, G], [x, w, b, dy], 4)
        tag = "group_norm %s G%d " % (shape, G)
        for name, g, want in zip(("y", "dx", "dw", "db"), got, (y.detach(), dx, dw_, db)):
            check(tag + name, g, want, 1e-5, 1e-5)


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["--no-conversions"]):
        print(__doc__)
        return 2
    driver = os.path.abspath(sys.argv[1])
    cases = [case_conversions, case_tf32] if len(sys.argv) == 2 else []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases + [case_linear, case_conv2d, case_pools,
                     case_layer_norm, case_batch_norm, case_softmax, case_losses,
                     case_activations, case_attention, case_attention_opt, case_attention_drop,
                     case_embedding,
                     case_elementwise2, case_rms_norm, case_rope, case_cross_entropy2, case_select,
                     case_extremum, case_route, case_rnn, case_conv_transpose2d, case_pad,
                     case_upsample, case_group_norm, case_linear_tf32]:
            case(driver, tmp)
    if failures:
        print("\n%d comparisons failed" % len(failures))
        return 1
    print("\nall comparisons with torch passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
