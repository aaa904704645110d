"""arch.py - PyTorch twins of the real-architecture examples, written from
the published structure of each reference (not copied from it):

  gpt2      examples/gpt2.mp      nanoGPT's model.py (GPT, Block,
            CausalSelfAttention, MLP, LayerNorm with optional bias)
  llama     examples/llama.mp     llama2.c's model.py (Transformer,
            TransformerBlock, Attention with repeat_kv, FeedForward,
            RMSNorm, apply_rotary_emb)
  resnet18  examples/resnet18.mp  kuangliu/pytorch-cifar's ResNet-18
            (BasicBlock with the conv1x1 + BatchNorm2d shortcut)

Module and parameter names are the references' own, so the state_dict keys
are theirs. Each twin keeps its reference's initialisation (nanoGPT's and
llama2.c's _init_weights, torch defaults for the ResNet). The two language
models tie their output layer to the token embedding as their references
do; `tied` maps the alias key to the key the trainer's checkpoint holds
(ref.py drops the alias when writing an --init file and fills it in before
load_state_dict(strict=True)).

torch here is 1.13: no scaled_dot_product_attention and no
LayerNorm(bias=False), so attention is the references' own non-flash path
(mask, softmax, product) and LayerNorm is nanoGPT's class. llama2.c's
non-flash mask is a persistent buffer; here it is not, so that the
state_dict keys are those of its flash path (torch 2).

forward(batch) -> (loss, {metric: value}), batch a dict of input tensors:
`seq` [B, T+1] (x = seq[:, :-1], y = seq[:, 1:], nanoGPT's get_batch) or
`image`, `label`.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- nanoGPT ---------------------------------------------------------------

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's; torch 1.13 lacks bias=False)."""
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def causal_attention(q, k, v):
    """softmax(q kᵀ / √hs, causal) v on (B, nh, T, hs)."""
    t = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return F.softmax(att.float() if att.dtype == torch.float16 else att, dim=-1).type_as(q) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, bias, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)   # q, k, v for all heads, fused
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)   # (B, nh, T, hs)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = causal_attention(q, k, v)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, bias, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, bias, dropout):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, bias, dropout)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP(n_embd, bias, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


class GPT(nn.Module):
    """nanoGPT's GPT; consts of examples/gpt2.mp: T (block_size), V, D, H, L,
    P (dropout). bias as nanoGPT's config (True: GPT-2's)."""
    tied = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, T=64, V=65, D=128, H=4, L=4, P=0.0, bias=True, **_):
        super().__init__()
        self.block_size = T
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, D),
            wpe=nn.Embedding(T, D),
            drop=nn.Dropout(P),
            h=nn.ModuleList([Block(D, H, bias, P) for _ in range(L)]),
            ln_f=LayerNorm(D, bias),
        ))
        self.lm_head = nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():               # scaled init of the residual projections
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * L))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, batch):
        seq = batch["seq"].long()
        idx, targets = seq[:, :-1], seq[:, 1:]
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        tok_emb = self.transformer.wte(idx)     # (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)     # (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return lm_loss(logits, targets), {}


# ---- llama2.c ---------------------------------------------------------------

def llama_hidden_dim(dim, multiple_of, hidden_dim=None):
    """FeedForward's hidden size as llama2.c computes it."""
    if hidden_dim is None:
        hidden_dim = 4 * dim
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
    return hidden_dim


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float() if x.dtype == torch.float16 else x).type_as(x) * self.weight


def precompute_freqs(dim, end, theta=10000.0):
    """cos and sin of p·theta^(-2i/dim), [end, dim/2], in float64."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
    freqs = torch.outer(torch.arange(end, dtype=torch.float64), freqs)
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary_emb(x, cos, sin):
    """Interleaved pairs (2i, 2i+1) of x [B, T, H, hd] rotated by position."""
    xr, xi = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    cos = cos.view(1, x.size(1), 1, -1).to(xr.dtype)
    sin = sin.view(1, x.size(1), 1, -1).to(xr.dtype)
    out = torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)
    return out.type_as(x)


def repeat_kv(x, n_rep):
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)."""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, cos, sin), apply_rotary_emb(xk, cos, sin)
        xk, xv = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        output = causal_attention(xq, xk, xv)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden_dim, eps):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = RMSNorm(dim, eps)
        self.ffn_norm = RMSNorm(dim, eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """llama2.c's Transformer; consts of examples/llama.mp: T (max_seq_len),
    V, DIM, L, H, KV, MULTIPLE_OF, EPS; HIDDEN must be what llama2.c computes."""
    tied = {"output.weight": "tok_embeddings.weight"}

    def __init__(self, T=64, V=65, DIM=128, L=4, H=4, KV=2, MULTIPLE_OF=32, EPS=1e-5, HIDDEN=None, **_):
        super().__init__()
        hidden = llama_hidden_dim(DIM, MULTIPLE_OF)
        if HIDDEN is not None and HIDDEN != hidden:
            raise ValueError(f"llama.mp's HIDDEN = {HIDDEN}, but llama2.c computes {hidden} "
                             f"for dim {DIM}, multiple_of {MULTIPLE_OF}")
        self.tok_embeddings = nn.Embedding(V, DIM)
        self.layers = nn.ModuleList(TransformerBlock(DIM, H, KV, hidden, EPS) for _ in range(L))
        self.norm = RMSNorm(DIM, EPS)
        self.output = nn.Linear(DIM, V, bias=False)
        self.tok_embeddings.weight = self.output.weight     # weight tying
        cos, sin = precompute_freqs(DIM // H, T)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():               # llama2.c: w3 and wo, not w2
            if pn.endswith("w3.weight") or pn.endswith("wo.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * L))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                torch.nn.init.zeros_(module.bias)

    def forward(self, batch):
        seq = batch["seq"].long()
        tokens, targets = seq[:, :-1], seq[:, 1:]
        seqlen = tokens.size(1)
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers:
            h = layer(h, cos, sin)
        h = self.norm(h)
        logits = self.output(h)
        return lm_loss(logits, targets), {}


# ---- kuangliu/pytorch-cifar ResNet-18 ----------------------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + self.shortcut(x)
        return F.relu(out)


class ResNet(nn.Module):
    """ResNet-18 of pytorch-cifar with in_planes W (64 there) and one input
    channel (Fashion-MNIST); consts of examples/resnet18.mp: W, CLASSES."""
    def __init__(self, W=64, CLASSES=10, num_blocks=(2, 2, 2, 2), **_):
        super().__init__()
        self.in_planes = W
        self.conv1 = nn.Conv2d(1, W, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(W)
        self.layer1 = self._make_layer(W, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(2 * W, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(4 * W, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(8 * W, num_blocks[3], stride=2)
        self.linear = nn.Linear(8 * W * BasicBlock.expansion, CLASSES)

    def _make_layer(self, planes, num_blocks, stride):
        layers = []
        for s in [stride] + [1] * (num_blocks - 1):
            layers.append(BasicBlock(self.in_planes, planes, s))
            self.in_planes = planes * BasicBlock.expansion
        return nn.Sequential(*layers)

    def forward(self, batch):
        x = batch["image"].to(self.linear.weight.dtype) / 255
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(out, 4)
        logits = self.linear(out.view(out.size(0), -1))
        label = batch["label"].long()
        return F.cross_entropy(logits, label), {"accuracy": (logits.argmax(-1) == label).double().mean()}


TWINS = {"gpt2": GPT, "llama": Transformer, "resnet18": ResNet}


# ---- torchvision's MobileNetV2 (models/mobilenetv2.py) -----------------------
# The module tree of torchvision's network (torchvision is not installed
# here): Conv2dNormActivation is Sequential(conv, bn, ReLU6), InvertedResidual
# keeps its layers in .conv, the network in .features and .classifier.

def conv_bn_relu6(inp, oup, k, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(inp, oup, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(oup), nn.ReLU6(inplace=False))


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [] if expand_ratio == 1 else [conv_bn_relu6(inp, hidden, 1)]
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's mobilenet_v2 (width 1.0) with IN input channels; consts
    of examples/mobilenetv2.mp: CLASSES, P (the classifier's dropout)."""
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, CLASSES=10, P=0.2, IN=1, **_):
        super().__init__()
        inp, features = 32, [conv_bn_relu6(IN, 32, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        features.append(conv_bn_relu6(inp, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(P), nn.Linear(1280, CLASSES))

    def forward(self, batch):
        x = batch["image"].to(self.classifier[1].weight.dtype) / 255
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        logits = self.classifier(torch.flatten(x, 1))
        label = batch["label"].long()
        return F.cross_entropy(logits, label), {"accuracy": (logits.argmax(-1) == label).double().mean()}


TWINS["mobilenetv2"] = MobileNetV2


# ---- milesial/Pytorch-UNet (unet_parts.py, bilinear=False) ---------------------

class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size()[2] - x1.size()[2], x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    """milesial's UNet, two levels (inc, down1, down2, up1, up2, outc) from W
    channels; consts of examples/unet.mp: W, CLASSES. The loss: per-pixel
    cross-entropy against the mask image/255 > 0.5."""
    def __init__(self, W=16, CLASSES=2, **_):
        super().__init__()
        self.inc = DoubleConv(1, W)
        self.down1, self.down2 = Down(W, 2 * W), Down(2 * W, 4 * W)
        self.up1, self.up2 = Up(4 * W, 2 * W), Up(2 * W, W)
        self.outc = OutConv(W, CLASSES)

    def forward(self, batch):
        x = batch["image"].to(self.outc.conv.weight.dtype) / 255
        x1 = self.inc(x)
        x2 = self.down1(x1)
        logits = self.outc(self.up2(self.up1(self.down2(x2), x2), x1))
        mask = (x > 0.5).long()[:, 0]
        return F.cross_entropy(logits, mask), {"pixel_accuracy": (logits.argmax(1) == mask).double().mean()}


TWINS["unet"] = UNet
