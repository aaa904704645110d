#!/usr/bin/env python3
"""torch_bench.py - the PyTorch side of bench/gpu_bench.sh: the same networks
as examples/mnist_mlp.mp and bench/mlp4096.mp, trained the way a PyTorch user
trains with mixed precision (autocast to float16, GradScaler, Adam), eager or
under torch.compile; or the cuBLAS float16 peak of the GPU (--peak).

Prints one JSON object on stdout:
  {"model", "mode", "batch", "steps", "samples_per_s", "step_ms",
   "max_allocated", "max_reserved", "loss"}        (bytes; loss at the end)
  {"peak_tflops", "shapes": {...}}                  with --peak

Data sit on the GPU before timing (PyTorch's best case), the loss is read
once at the end (no per-step synchronisation), and the timed steps follow
warm-up steps (compilation, cuBLAS heuristics, the allocator's pool)."""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT(nn.Module):
    """GPT-2 small as nanoGPT's model.py writes it (examples/gpt2.mp with the
    sizes bench/gpu_check.sh gives it): vocabulary 50304, 1024 positions,
    12 layers of 12 heads of 64, biases, no dropout, lm_head tied to wte,
    attention through scaled_dot_product_attention (FlashAttention)."""

    def __init__(self, V=50304, T=1024, D=768, H=12, L=12):
        super().__init__()
        self.H = H
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln_1": nn.LayerNorm(D), "c_attn": nn.Linear(D, 3 * D), "attn_proj": nn.Linear(D, D),
            "ln_2": nn.LayerNorm(D), "c_fc": nn.Linear(D, 4 * D), "mlp_proj": nn.Linear(4 * D, D)})
            for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = b["c_attn"](b["ln_1"](x)).split(x.size(2), dim=2)
            q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b["attn_proj"](y.transpose(1, 2).contiguous().view(B, T, -1))
            x = x + b["mlp_proj"](F.gelu(b["c_fc"](b["ln_2"](x))))
        return self.ln_f(x) @ self.wte.weight.t()


def network(model):
    if model == "gpt2":             # examples/gpt2.mp at GPT-2 small, batch 8
        return GPT(), 8
    if model == "mnist_mlp":        # examples/mnist_mlp.mp
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10)), 128
    if model == "mlp4096":          # bench/mlp4096.mp
        layers = []
        for _ in range(4):
            layers += [nn.Linear(4096, 4096), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(4096, 16)), 8192
    raise SystemExit("unknown model " + model)


def batches(model, batch, n, dev):
    g = torch.Generator(device="cpu").manual_seed(0)
    if model == "gpt2":
        seq = torch.randint(0, 50257, (n, batch, 1025), generator=g)
        return seq[:, :, :-1].contiguous().to(dev), seq[:, :, 1:].contiguous().to(dev)
    if model == "mnist_mlp":
        x = torch.randint(0, 256, (n, batch, 784), generator=g, dtype=torch.uint8)
        y = torch.randint(0, 10, (n, batch), generator=g)
    else:
        x = torch.randn(n, batch, 4096, generator=g).half()
        y = torch.randint(0, 16, (n, batch), generator=g)
    return x.to(dev), y.to(dev)


def train(args):
    dev = "cuda"
    net, batch = network(args.model)
    net = net.to(dev)
    if args.model == "gpt2":        # nanoGPT's configure_optimizers and clipping
        decay = [p for p in net.parameters() if p.dim() >= 2]
        rest = [p for p in net.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), fused=True)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-3 if args.model == "mnist_mlp" else 1e-4)
    scaler = torch.cuda.amp.GradScaler(init_scale=32768.0)
    fwd = net
    if args.mode == "compile":
        fwd = torch.compile(net)
    elif args.mode == "compile-cudagraphs":
        fwd = torch.compile(net, mode="reduce-overhead")
    xs, ys = batches(args.model, batch, 8, dev)

    def step(i):
        x, y = xs[i % 8], ys[i % 8]
        if args.model == "mnist_mlp":
            x = x.float() / 255
        with torch.autocast("cuda", dtype=torch.float16):
            logits = fwd(x)
            loss = F.cross_entropy(logits.float().flatten(0, -2), y.flatten())
        scaler.scale(loss).backward()
        if args.model == "gpt2":
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"model": args.model, "mode": args.mode, "batch": batch, "steps": args.steps,
            "samples_per_s": batch * args.steps / dt, "step_ms": 1e3 * dt / args.steps,
            "max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved(), "loss": float(loss)}


def peak(args):
    """The best float16 GEMM rate cuBLAS reaches here (f32 accumulation)."""
    out = {}
    for m, n, k in [(8192, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        iters = 30
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        out["%dx%dx%d" % (m, n, k)] = 2.0 * m * n * k * iters / (time.perf_counter() - t0) / 1e12
    return {"peak_tflops": max(out.values()), "shapes": out}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mnist_mlp")
    p.add_argument("--mode", default="eager", choices=["eager", "compile", "compile-cudagraphs"])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--peak", action="store_true")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(json.dumps(peak(args) if args.peak else train(args)))


if __name__ == "__main__":
    main()
