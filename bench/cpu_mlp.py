"""cpu_mlp.py - PyTorch's side of bench/cpu_mlp.sh: the MNIST MLP of
LANGUAGE.md (784-512-10, relu, cross-entropy, Adam 1e-3) trained on the
CPU at batch 128, shuffled batches, with the same thread count as the C
trainer. Prints one line per mode: MODE samples_per_s.

    cpu_mlp.py TRAIN_X.npy TRAIN_Y.npy THREADS STEPS [bf16]

Timing: STEPS steps after 20 warm-up steps, wall clock; the input is
converted from u8 per batch, as the generated trainer does. 'bf16' adds
torch.autocast('cpu', dtype=torch.bfloat16), which exists in torch 1.13
but is only fast on CPUs with native bf16 (AVX512-BF16 / AMX)."""
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
import models  # noqa: E402


def run(x, y, steps, autocast):
    torch.manual_seed(0)
    net = models.MnistMlp()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    n = len(x) // 128
    perm = torch.randperm(len(x))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    t0 = None
    for k in range(steps + 20):
        if k == 20:
            t0 = time.perf_counter()
        idx = perm[(k % n) * 128:(k % n + 1) * 128]
        b = {"image": xt[idx], "label": yt[idx]}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, _ = net(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return steps * 128 / (time.perf_counter() - t0), loss.item()


def main():
    x, y = np.load(sys.argv[1]), np.load(sys.argv[2])
    torch.set_num_threads(int(sys.argv[3]))
    steps = int(sys.argv[4])
    sps, loss = run(x, y, steps, False)
    print(f"float32 {sps:.0f} {loss:.4f}")
    if len(sys.argv) > 5 and sys.argv[5] == "bf16":
        sps, loss = run(x, y, max(steps // 20, 10), True)
        print(f"autocast_bf16 {sps:.0f} {loss:.4f}")


if __name__ == "__main__":
    main()
