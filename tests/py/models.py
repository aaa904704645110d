"""models.py - the PyTorch twins of the .mp models the reference tests
train. A twin has the .mp model's parameters under the same names and
shapes (torch.nn modules), and forward(batch) -> (loss, {metric: value})
computing what the .mp file computes, in float32 or float64.

TWINS maps the .mp `model` name to its twin's class. A twin takes the
model's integer constants (const NAME = ...) as keyword arguments where the
shapes depend on them.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- emulation of the low precision type (mixed_float16 / mixed_bfloat16)
# as PRECISION.md and the plan define it: a lowp product rounds its inputs
# to the lowp type, accumulates in f32 (here: in the twin's dtype) and
# rounds its result and, in the backward pass, its input gradients; a cast
# from lowp up to f32 rounds the gradient going back. Values stay in the
# twin's dtype, holding only lowp-representable numbers where the plan says
# the type is lowp.

def _round(t, lowp):
    return t.to(lowp).to(t.dtype)


class ToLowp(torch.autograd.Function):
    """A cast f32 -> lowp: rounds; its backward (lowp -> f32) is exact."""
    @staticmethod
    def forward(ctx, x, lowp):
        return _round(x, lowp)

    @staticmethod
    def backward(ctx, g):
        return g, None


class FromLowp(torch.autograd.Function):
    """A cast lowp -> f32: exact; its backward rounds the gradient to lowp."""
    @staticmethod
    def forward(ctx, x, lowp):
        ctx.lowp = lowp
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return _round(g, ctx.lowp), None


class LinearLowp(torch.autograd.Function):
    """linear in the lowp class on lowp inputs: each result rounded once."""
    @staticmethod
    def forward(ctx, x, w, b, lowp):
        ctx.save_for_backward(x, w)
        ctx.lowp = lowp
        return _round(x @ w.t() + b, lowp)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        r = lambda t: _round(t, ctx.lowp)  # noqa: E731
        return r(g @ w), r(g.t() @ x), r(g.sum(0)), None


def tf32(t):
    """t rounded to TF32 (10 mantissa bits) to nearest, ties to even, in
    t's own dtype: the spacing of TF32 values at |t| is 2^(e - 10), e its
    binary exponent (at least -126); torch.round rounds halves to even."""
    _, e = torch.frexp(t)
    s = torch.clamp(e.to(torch.int64) - 1, min=-126) - 10
    return torch.ldexp(torch.round(torch.ldexp(t, -s)), s)


class LinearTf32(torch.autograd.Function):
    """linear under float32_matmul "tf32" (PRECISION.md): each of its three
    products (y, dx, dw) reads its two operands rounded to TF32 and sums in
    the twin's dtype; the bias and its gradient are not products."""
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return tf32(x) @ tf32(w).t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return tf32(g) @ tf32(w), tf32(g).t() @ tf32(x), g.sum(0)


class Fp8Scales:
    """mixed_float8's per-tensor scales (PRECISION.md "Additions: TF32 and
    FP8"), kept as the C program keeps them (runtime/mp_fp8.h), written
    from the spec's words: a slot's scale is 2^e with e the largest integer
    such that amax * 2^e <= the format's max, less margin, within +-63;
    delayed scaling takes amax as the largest of the last `history` steps'
    (the first step: the tensor's own), current scaling the tensor's own.
    A step's amax is recorded at its end (a non-finite one as 0); an
    evaluation (training False) records nothing."""
    FMT = {"e4m3": (3, -6, 448.0), "e5m2": (2, -14, 57344.0)}
    EMAX = 63

    def __init__(self, recipe="delayed", amax_history=16, margin=0):
        self.current, self.history, self.margin = recipe == "current", amax_history, margin
        self.exp, self.fmt, self.amax, self.hist = {}, {}, {}, {}
        self.steps, self.training = 0, True

    def scale_exp(self, a, fmt, prev):
        if not a > 0 or math.isinf(a):
            return prev
        m, ea = math.frexp(a)
        mf, em = math.frexp(self.FMT[fmt][2])
        return max(-self.EMAX, min(self.EMAX, em - ea - (1 if m > mf else 0) - self.margin))

    def observe(self, slot, fmt, t):
        """slot's first product this step reads t: its exponent"""
        a = float(t.detach().abs().max())
        self.fmt[slot] = fmt
        self.exp.setdefault(slot, 0)
        if self.training:
            old = self.amax.get(slot, 0.0)
            self.amax[slot] = a if (a != a or old != old) else max(old, a)
        if self.current or self.steps == 0:
            self.exp[slot] = self.scale_exp(a, fmt, self.exp[slot])
        return self.exp[slot]

    def quantise(self, t, e, fmt):
        """fp8(t * 2^e), round to nearest even, saturating, in t's dtype"""
        mbits, emin, fmax = self.FMT[fmt]
        v = torch.clamp(torch.ldexp(t, torch.tensor(e)), -fmax, fmax)
        _, x = torch.frexp(v)
        s = torch.clamp(x.to(torch.int64) - 1, min=emin) - mbits
        return torch.ldexp(torch.round(torch.ldexp(v, -s)), s)

    def step_end(self):
        if not self.current:
            for s in self.exp:
                a = self.amax.get(s, 0.0)
                self.hist.setdefault(s, []).append(a if math.isfinite(a) else 0.0)
                self.hist[s] = self.hist[s][-self.history:]
                self.exp[s] = self.scale_exp(max(self.hist[s]), self.fmt[s], self.exp[s])
        self.steps += 1
        self.amax = {}


class LinearFp8(torch.autograd.Function):
    """linear under mixed_float8: x (lowp) and w (the f32 master weight)
    quantised to e4m3, dy to e5m2 for both gradient products (reusing the
    e4m3 x and w); each product sums the quantised values and divides by
    the two scales (exact: powers of two); y and dx rounded to lowp, dw kept
    in f32 (the plan's type), the bias as under lowp."""
    @staticmethod
    def forward(ctx, x, w, b, sc, name, lowp):
        ex, ew = sc.observe(name + ".x", "e4m3", x), sc.observe(name + ".w", "e4m3", w)
        qx, qw = sc.quantise(x, ex, "e4m3"), sc.quantise(w, ew, "e4m3")
        ctx.save_for_backward(qx, qw)
        ctx.sc, ctx.name, ctx.e, ctx.lowp = sc, name, (ex, ew), lowp
        return _round(torch.ldexp(qx @ qw.t(), torch.tensor(-(ex + ew))) + b, lowp)

    @staticmethod
    def backward(ctx, g):
        qx, qw = ctx.saved_tensors
        (ex, ew), sc = ctx.e, ctx.sc
        eg = sc.observe(ctx.name + ".dy", "e5m2", g)
        qg = sc.quantise(g, eg, "e5m2")
        dx = _round(torch.ldexp(qg @ qw, torch.tensor(-(eg + ew))), ctx.lowp)
        dw = torch.ldexp(qg.t() @ qx, torch.tensor(-(eg + ex)))
        return dx, dw, _round(g.sum(0), ctx.lowp), None, None, None


def linear(x, layer, lowp, use_tf32=False, fp8=None, name=""):
    """layer(x) in f32, or the lowp class of the plan when lowp is set, or
    on TF32 operands under float32_matmul "tf32", or quantised (mixed_float8)
    when fp8 (an Fp8Scales) is set."""
    if fp8 is not None:
        return LinearFp8.apply(ToLowp.apply(x, lowp), layer.weight, ToLowp.apply(layer.bias, lowp),
                               fp8, name, lowp)
    if use_tf32:
        return LinearTf32.apply(x, layer.weight, layer.bias)
    if lowp is None:
        return layer(x)
    return LinearLowp.apply(ToLowp.apply(x, lowp), ToLowp.apply(layer.weight, lowp),
                            ToLowp.apply(layer.bias, lowp), lowp)


def accuracy(logits, labels):
    return (logits.argmax(-1) == labels.long()).double().mean()


def xent(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


class MnistMlp(nn.Module):
    """examples/mnist_mlp.mp (LANGUAGE.md's model), any hidden width. With
    lowp set (a torch dtype), the mixed precision plan is emulated: h in
    lowp, `logits: f32` in f32 (mpcc --dump-plan examples/mnist_mlp.mp).
    With tf32 set, float32_matmul "tf32" under float32: both layers'
    products on TF32 operands. With fp8 set (an Fp8Scales, lowp bf16),
    mixed_float8: the hidden layer's products quantised."""
    lowp = None
    tf32 = False
    fp8 = None

    def __init__(self, H=512, **_):
        super().__init__()
        self.h = nn.Linear(784, H)
        self.logits = nn.Linear(H, 10)

    def forward(self, b):
        x = b["image"].to(self.h.weight.dtype) / 255
        h = F.relu(linear(x, self.h, self.lowp, self.tf32, self.fp8, "h"))
        if self.lowp is not None:
            h = FromLowp.apply(h, self.lowp)
        logits = linear(h, self.logits, None, self.tf32)
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


class Zoo(nn.Module):
    """tests/models/zoo.mp: most elementwise ops, both norms, mse, softmax."""
    def __init__(self, **_):
        super().__init__()
        self.a = nn.Linear(64, 48)
        self.b = nn.Linear(48, 48)
        self.fc = nn.Linear(48, 32, bias=False)
        self.c = nn.BatchNorm1d(32)
        self.d = nn.LayerNorm(32)
        self.logits = nn.Linear(32, 10)

    def forward(self, bt):
        u = bt["x"].to(self.a.weight.dtype) / 16 - 0.5
        a = torch.tanh(self.a(u))
        b = F.gelu(self.b(a)) * torch.rsqrt(torch.sigmoid(a) + 1) + torch.log(1 + torch.exp(a))
        c = F.relu(self.c(self.fc(b)))
        d = self.d(F.silu(c))
        logits = self.logits(d)
        p = F.softmax(logits, -1)
        ent = (torch.exp(F.log_softmax(logits, -1)) * p).sum(1).mean(0)
        loss = xent(logits, bt["label"]) + F.mse_loss(p, bt["target"].to(p.dtype)) + 0.1 * ent
        return loss, {"accuracy": accuracy(logits, bt["label"])}


TWINS = {"mnist_mlp": MnistMlp, "mlp_small": MnistMlp, "ls_overflow": MnistMlp, "zoo": Zoo}


class CnnBn(nn.Module):
    """tests/models/cnn_bn.mp."""
    def __init__(self, **_):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.c1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.c2 = nn.BatchNorm2d(16)
        self.logits = nn.Linear(16 * 3 * 3, 10)
        self.gap = nn.Linear(16, 10, bias=False)

    def forward(self, b):
        x = (b["image"].to(self.logits.weight.dtype) / 255).reshape(-1, 1, 28, 28)
        c1 = F.relu(self.c1(self.conv1(x)))
        c2 = F.relu(self.c2(self.conv2(F.max_pool2d(c1, 2, 2))))
        p2 = F.avg_pool2d(c2, 3, 2)
        logits = self.logits(p2.flatten(1)) + self.gap(c2.mean((2, 3)))
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


class MbConv(nn.Module):
    """tests/models/mbconv.mp: an inverted residual, then grouped, dilated,
    "same", pair and depthwise conv1d forms."""
    def __init__(self, **_):
        super().__init__()
        self.stem, self.stem_bn = nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.expand, self.expand_bn = nn.Conv2d(8, 24, 1, bias=False), nn.BatchNorm2d(24)
        self.dw, self.dw_bn = nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False), nn.BatchNorm2d(24)
        self.project, self.project_bn = nn.Conv2d(24, 8, 1, bias=False), nn.BatchNorm2d(8)
        self.dw2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8)
        self.grouped = nn.Conv2d(16, 16, 4, padding="same", dilation=(1, 2), groups=4)
        self.pairs = nn.Conv2d(16, 16, (3, 1), padding=(1, 0))
        self.seq = nn.Conv1d(16, 16, 5, stride=2, padding=2, groups=16)
        self.fc = nn.Linear(16, 10)

    def forward(self, b):
        x = (b["image"].to(self.fc.weight.dtype) / 255).reshape(-1, 1, 28, 28)
        s = self.stem_bn(self.stem(x)).clamp(0, 6)
        e = self.expand_bn(self.expand(s)).clamp(0, 6)
        d = self.dw_bn(self.dw(e)).clamp(0, 6)
        r = s + self.project_bn(self.project(d))
        g = self.grouped(self.dw2(r)).clamp(0, 6)
        q = self.pairs(g)
        t = self.seq(q.reshape(q.shape[0], 16, 49))
        return xent(self.fc(t.mean(2)), b["label"]), {}


class Attn(nn.Module):
    def __init__(self, d, h, k_bias=False):
        super().__init__()
        self.h = h
        self.q, self.v, self.proj = (nn.Linear(d, d) for _ in range(3))
        self.k = nn.Linear(d, d, bias=k_bias)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (m(x).reshape(b, t, self.h, d // self.h).transpose(1, 2) for m in (self.q, self.k, self.v))
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = F.softmax(s, -1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Mlp(nn.Module):
    """linear(x, 4d) named `hidden`, gelu, linear(., d) named proj."""
    def __init__(self, d, hidden="h"):
        super().__init__()
        self.hidden = hidden
        setattr(self, hidden, nn.Linear(d, 4 * d))
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(getattr(self, self.hidden)(x)))


class Layer(nn.Module):
    def __init__(self, d, h, k_bias=False, hidden="h"):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attn(d, h, k_bias)
        self.ln2, self.mlp = nn.LayerNorm(d), Mlp(d, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTf(nn.Module):
    """tests/models/char_tf.mp."""
    def __init__(self, T=32, V=128, D=32, H=2, L=2, **_):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer(D, H) for _ in range(L))
        self.lnf = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, b):
        x = self.tok(b["tokens"].long()) + self.pos
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.lnf(x))
        return xent(logits, b["targets"]), {"accuracy": accuracy(logits.reshape(-1, logits.shape[-1]), b["targets"].reshape(-1))}


class CharTransformer(nn.Module):
    """examples/char_transformer.mp."""
    def __init__(self, T=64, V=65, D=64, H=4, L=2, **_):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.tok = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer(D, H, k_bias=True, hidden="fc") for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, b):
        x = self.tok(b["tokens"].long()) + self.pos
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.ln_f(x))
        return xent(logits, b["targets"]), {"accuracy": accuracy(logits, b["targets"])}


class SplitAttn(nn.Module):
    """nanoGPT's CausalSelfAttention: one c_attn, split into q, k, v."""
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in self.c_attn(x).split(d, dim=2))
        s = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.c_proj((F.softmax(s, -1) @ v).transpose(1, 2).reshape(b, t, d))


class GatedMlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        a, gate = self.c_fc(x).chunk(2, dim=-1)
        return self.c_proj(F.gelu(a) * torch.sigmoid(gate))


class GptSplitBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), SplitAttn(d, h), nn.LayerNorm(d), GatedMlp(d)


class GptSplit(nn.Module):
    """tests/models/gpt_split.mp: chunk, slice, concat, expand, arange."""
    def __init__(self, T=32, V=128, D=32, H=2, L=2, **_):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(1, D) * 0.02)
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(GptSplitBlock(D, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V)

    def forward(self, b):
        tok = b["tokens"].long()
        bs, t = tok.shape
        x = self.wte(tok) + self.wpe(torch.arange(t))
        for blk in self.h:
            x = x + blk.attn(blk.ln_1(x))
            x = x + blk.mlp(blk.ln_2(x))
        f = self.ln_f(x)
        d = f.shape[-1]
        prev = torch.cat([f[:, 0:1], f[:, 0:-1]], 1)
        mix = torch.cat([f[..., 0:d // 2], prev[..., -(d // 2):d]], 2)
        logits = self.lm_head(mix + self.shift.expand(bs, t, -1))
        return xent(logits, b["targets"]), {"accuracy": accuracy(logits, b["targets"])}


TWINS["gpt_split"] = GptSplit


class MnistCnn(nn.Module):
    """examples/mnist_cnn.mp."""
    def __init__(self, **_):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, b):
        x = b["image"].to(self.fc.weight.dtype) / 255
        p1 = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        p2 = F.max_pool2d(F.relu(self.bn2(self.conv2(p1))), 2)
        logits = self.fc(p2.flatten(1))
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


class DigitsMlp(nn.Module):
    """examples/digits_mlp.mp."""
    def __init__(self, **_):
        super().__init__()
        self.h = nn.Linear(64, 64)
        self.logits = nn.Linear(64, 10)

    def forward(self, b):
        logits = self.logits(torch.tanh(self.h(b["pixels"].to(self.h.weight.dtype) / 16)))
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


class MetricAlias(MnistMlp):
    """tests/models/metric_alias.mp: metrics that must each keep their value."""
    def forward(self, b):
        x = b["image"].to(self.h.weight.dtype) / 255
        h = F.relu(self.h(x))
        logits = self.logits(h)
        reg = (h * h).sum(1).mean(0)
        return xent(logits, b["label"]) + 1e-4 * reg, {
            "accuracy": accuracy(logits, b["label"]), "activity": reg,
            "confidence": (F.softmax(logits, -1) ** 2).sum(1).mean(0)}


class MlpBuffer(MnistMlp):
    """tests/models/mlp_buffer.mp: buffers in expressions. They are drawn
    at random (not the .mp file's initialisers), so the trainer matches only
    if --init loaded them."""
    def __init__(self, H=64, **_):
        super().__init__(H)
        self.register_buffer("pixel_mean", torch.rand(784) * 0.3)
        self.register_buffer("pixel_scale", 0.5 + torch.rand(784))
        self.register_buffer("class_prior", torch.randn(10) * 0.5)

    def forward(self, b):
        x = (b["image"].to(self.h.weight.dtype) / 255 - self.pixel_mean) * self.pixel_scale
        logits = self.logits(F.relu(self.h(x))) + self.class_prior
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


TWINS.update({"mlp_buffer": MlpBuffer, "metric_alias": MetricAlias, "cnn_bn": CnnBn, "char_tf": CharTf, "char_transformer": CharTransformer,
              "mnist_cnn": MnistCnn, "digits_mlp": DigitsMlp, "mbconv": MbConv})

# ---- the additions of LANGUAGE.md (tests/models/zoo2.mp) -------------------

def rope(x, axis, theta=10000.0, half=False):
    """Rotary embedding of x's last axis, positions along `axis`: llama2.c's
    interleaved pairs (2i, 2i+1) or rotate_half's (i, i + D/2)."""
    D, P = x.shape[-1], x.shape[axis]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=x.dtype) / D)
    ang = torch.arange(P, dtype=x.dtype)[:, None] * inv[None, :]       # [P, D/2]
    shape = [1] * x.dim()
    shape[axis], shape[-1] = P, D // 2
    cos, sin = torch.cos(ang).reshape(shape), torch.sin(ang).reshape(shape)
    if half:
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class WeightOnly(nn.Module):
    """torch.nn.RMSNorm / LayerNorm(bias=False), which this torch predates:
    a weight [D] of ones."""
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))


class Zoo2(nn.Module):
    """tests/models/zoo2.mp."""
    def __init__(self, B=32, **_):
        super().__init__()
        self.B = B
        self.a = nn.Linear(64, 48)
        self.n = WeightOnly(48)
        self.b = nn.Linear(48, 48)
        self.d = WeightOnly(48)
        self.logits = nn.Linear(48, 10)

    def forward(self, bt):
        u = bt["x"].to(self.a.weight.dtype) / 16 - 0.5
        a = self.a(u)
        r = a.reshape(self.B, 6, 8)
        h = (rope(r, 1) + rope(r, -2, theta=100.0, half=True)).reshape(self.B, 48)
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * self.n.weight
        b = F.gelu(self.b(n), approximate="tanh")
        c = (torch.clamp(torch.maximum(b, torch.minimum(a, torch.tensor(0.2, dtype=a.dtype))), -1, 2)
             + torch.abs(torch.sin(b)) * torch.cos(a) + torch.pow(torch.abs(b) + 1, 1.5) * 0.1)
        d = F.layer_norm(c, (48,), self.d.weight, None, 1e-5)
        logits = self.logits(d)
        loss = F.cross_entropy(logits, bt["label"].long(), ignore_index=3, label_smoothing=0.1)
        return loss, {"accuracy": accuracy(logits, bt["label"])}


TWINS["zoo2"] = Zoo2


# ---- the front end's additions (tests/models/rnn_loop.mp) -------------------

class RnnLoop(nn.Module):
    """tests/models/rnn_loop.mp: one cell (xz, hz, xc, hc) applied at every
    step, as the .mp file's for loop shares it."""
    def __init__(self, B=32, T=8, I=8, HID=16, **_):
        super().__init__()
        self.B, self.T, self.I, self.HID = B, T, I, HID
        self.h0 = nn.Linear(I, HID)
        self.xz, self.hz = nn.Linear(I, HID), nn.Linear(HID, HID)
        self.xc, self.hc = nn.Linear(I, HID), nn.Linear(HID, HID)
        self.logits = nn.Linear(2 * HID, 10)

    def forward(self, bt):
        u = (bt["x"].to(self.h0.weight.dtype) / 16 - 0.5).reshape(self.B, self.T, self.I)
        h = torch.tanh(self.h0(u[:, 0]))
        for t in range(1, self.T):
            z = torch.sigmoid(self.xz(u[:, t]) + self.hz(h))
            c = torch.tanh(self.xc(u[:, t]) + self.hc(h))
            h = z * h + (1 - z) * c
        s = torch.stack([h, h * torch.sigmoid(1.702 * h)], dim=1)
        logits = self.logits(s.reshape(self.B, 2 * self.HID))
        scale = math.log(math.exp(2)) / math.sqrt(16) * 2 % 3
        loss = F.cross_entropy(logits, bt["label"].long()) * scale
        return loss, {"accuracy": accuracy(logits, bt["label"])}


TWINS["rnn_loop"] = RnnLoop


class CharGru(nn.Module):
    """examples/char_gru.mp: nn.GRU as it is, batch_first."""
    def __init__(self, V=65, D=64, HID=128, **_):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.rnn = nn.GRU(D, HID, num_layers=2, batch_first=True)
        self.head = nn.Linear(HID, V)

    def forward(self, b):
        h, _ = self.rnn(self.embed(b["tokens"].long()))
        logits = self.head(h)
        return xent(logits, b["targets"]), {"accuracy": accuracy(logits, b["targets"])}


TWINS["char_gru"] = CharGru


class Zoo3(nn.Module):
    """tests/models/zoo3.mp: comparisons, where, masked_fill, detach, zeros /
    ones / full, a bool mask promoted in arithmetic, max / min / argmax /
    argmin along an axis, sum / mean over lists of axes."""
    def __init__(self, B=32, **_):
        super().__init__()
        self.B = B
        self.a = nn.Linear(64, 48)
        self.s = nn.Linear(48, 48)
        self.logits = nn.Linear(48, 10)

    def forward(self, bt):
        x = bt["x"].to(self.a.weight.dtype)
        dt = x.dtype
        on = x > 8
        u = x / 16 - 0.5
        v = (u + on * u + torch.where(x <= 4, u, torch.tensor(0.25, dtype=dt)) * (x != 0).to(dt)
             - (x == 16).to(dt) * 0.5)
        a = self.a(v)
        h = torch.where(a >= 0, a, a * 0.1)
        m = h.masked_fill(a < -1, -0.1)
        s = self.s(m)
        g = torch.tanh(s.detach() * 0.5 + s + torch.full((48,), 0.1, dtype=dt)
                       + torch.zeros(self.B, 48, dtype=dt) * torch.ones(self.B, 1, dtype=dt))
        r = g.reshape(self.B, 6, 8)
        pk = r.max(2, keepdim=True).values - r.min(-1, keepdim=True).values
        n = r / (pk + 1) + r.mean((1, 2), keepdim=True) + r.sum((0, 2), keepdim=True) * 0.01
        top = (r.argmax(2).to(dt) - r.argmin(-1).to(dt)).reshape(self.B, 6, 1) * 0.01
        logits = self.logits((n + top + r.max(1, keepdim=True).values).reshape(self.B, 48))
        loss = F.cross_entropy(logits, bt["label"].long())
        return loss, {"accuracy": accuracy(logits, bt["label"])}


TWINS["zoo3"] = Zoo3


# ---- routing and indexing (tests/models/moe.mp) ------------------------------

class MoeExpert(nn.Module):
    """Hugging Face's MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)."""
    def __init__(self, D, F):
        super().__init__()
        self.w1 = nn.Linear(D, F, bias=False)
        self.w2 = nn.Linear(F, D, bias=False)
        self.w3 = nn.Linear(D, F, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoeBlock(nn.Module):
    """Hugging Face's MixtralSparseMoeBlock (router, softmax, top-k, the
    weights renormalised, tokens dispatched to each expert and added back
    with index_add_), with Switch Transformer's expert capacity: an
    assignment past its expert's CAP-th, in token order, is dropped."""
    def __init__(self, D, E, K, F, CAP):
        super().__init__()
        self.E, self.K, self.CAP = E, K, CAP
        self.gate = nn.Linear(D, E, bias=False)
        self.experts = nn.ModuleList([MoeExpert(D, F) for _ in range(E)])

    def forward(self, h):
        n, d = h.shape
        probs = F.softmax(self.gate(h), dim=-1)
        w, sel = torch.topk(probs, self.K, dim=-1)
        mask = F.one_hot(sel, self.E)                                  # [n, K, E]
        flat = mask.reshape(n * self.K, self.E).to(h.dtype)
        pos = torch.cumsum(flat, 0) * flat
        kept = ((pos <= self.CAP).reshape(n, self.K, self.E) * mask).sum(2)
        w = w / w.sum(-1, keepdim=True) * kept
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            tok, k = torch.where(sel == e)
            out.index_add_(0, tok, expert(h[tok]) * w[tok, k, None])
        aux = self.E * torch.sum(mask.to(h.dtype).mean(0) * probs.mean(0))   # load balancing
        return out, aux


class Moe(nn.Module):
    """tests/models/moe.mp: a Mixtral-style sparse MoE block on the digits."""
    def __init__(self, B=32, D=32, E=4, K=2, F=48, CAP=20, **_):
        super().__init__()
        self.inp = nn.Linear(64, D)
        self.moe = MoeBlock(D, E, K, F, CAP)
        self.logits = nn.Linear(D, 10)

    def forward(self, bt):
        h = F.silu(self.inp(bt["x"].to(self.inp.weight.dtype) / 16 - 0.5))
        moe, aux = self.moe(h)
        logits = self.logits(h + moe)
        loss = F.cross_entropy(logits, bt["label"].long()) + 0.02 * aux
        return loss, {"accuracy": accuracy(logits, bt["label"])}


TWINS["moe"] = Moe


class Seg(nn.Module):
    """tests/models/seg.mp: per-pixel cross-entropy with the classes on
    axis 1 (torch's layout), ignore_index and label smoothing."""
    def __init__(self, B=32, **_):
        super().__init__()
        self.B = B
        self.h = nn.Conv2d(1, 8, 3, padding=1)
        self.cls = nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, bt):
        x = bt["x"].to(self.h.weight.dtype)
        out = self.cls(F.relu(self.h((x / 16 - 0.5).reshape(self.B, 1, 8, 8))))
        bands = torch.stack([torch.zeros_like(x), (x > 4).to(x.dtype), (x > 10).to(x.dtype) * 2], 2)
        band = bands.argmax(2).reshape(self.B, 8, 8)
        loss = F.cross_entropy(out, band, ignore_index=0, label_smoothing=0.1)
        return loss, {}


TWINS["seg"] = Seg
