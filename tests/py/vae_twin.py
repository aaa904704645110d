"""vae_twin.py - examples/vae.mp against PyTorch's VAE (pytorch/examples
vae/main.py: fc1 -> fc21 / fc22, reparameterize, fc3 -> fc4, loss =
binary_cross_entropy(recon, x, reduction='sum') + KLD, here per image and
from the logits), both in float32 with Adam, fed the same noise: torch's
eps for step k is tests/py/rng.py's draw of (seed, k, micro-batch 0, the
randn node), so the two runs follow one trajectory (t_random.sh).

    vae_twin.py init DIR          DIR/init.safetensors: torch's initial weights
                                  under the .mp names
    vae_twin.py check DIR SEED    DIR/twin.jsonl, DIR/twin.safetensors (the
                                  trainer run from them on DIR/x.npy, --no-shuffle)
                                  against torch: every step's loss, the weights"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import rng  # noqa: E402
import st  # noqa: E402

B, Z = 128, 20
NAMES = {"fc1": "h", "fc2": "stats", "fc3": "d", "fc4": "logits"}


class VAE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 400)
        self.fc2 = torch.nn.Linear(400, 2 * Z)    # fc21 and fc22 as one layer, then chunk
        self.fc3 = torch.nn.Linear(Z, 400)
        self.fc4 = torch.nn.Linear(400, 784)

    def forward(self, x, eps):
        mu, logvar = self.fc2(F.relu(self.fc1(x))).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * eps
        logits = self.fc4(F.relu(self.fc3(z)))
        bce = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / B
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / B
        return bce + kld


def state(net):
    return {f"{NAMES[k.split('.')[0]]}.{k.split('.')[1]}": v.detach().numpy().copy()
            for k, v in net.state_dict().items()}


def init(d):
    torch.manual_seed(0)
    st.write(f"{d}/init.safetensors", state(VAE()))
    return []


def check(d, seed):
    seed = int(seed)
    net = VAE()
    w = st.read(f"{d}/init.safetensors")
    net.load_state_dict({k: torch.from_numpy(w[f"{NAMES[k.split('.')[0]]}.{k.split('.')[1]}"])
                         for k in net.state_dict()})
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    node = next(n["id"] for n in json.load(open(f"{d}/plan.json"))["nodes"] if n["op"] == "randn")
    x = torch.from_numpy(np.load(f"{d}/x.npy").astype(np.float32) / 255)
    log = {o["step"]: o for o in (json.loads(l) for l in open(f"{d}/twin.jsonl") if l.strip()) if "eval" not in o}
    errs = []
    for k in range(1, max(log) + 1):
        eps = torch.from_numpy(rng.randn(seed, k, 0, node, B * Z).astype(np.float32).reshape(B, Z))
        loss = net(x[(k - 1) * B:k * B], eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        got = log[k]["loss"]
        print(f"  step {k}: loss {got:.6f}, PyTorch {loss.item():.6f}")
        if abs(got - loss.item()) > 2e-5 * abs(loss.item()):
            errs.append(f"step {k}: loss {got} vs PyTorch {loss.item()}")
    # Adam moves a weight by about lr a step whatever its gradient's size, so
    # f32 rounding in a near-zero gradient can move it by a fraction of lr
    got = st.read(f"{d}/twin.safetensors")
    for k, v in state(net).items():
        dv = np.abs(got[k] - v).max()
        if dv > 2e-4:
            errs.append(f"{k} differs from PyTorch's by {dv}")
    print(f"  weights after {max(log)} steps: largest difference "
          f"{max(np.abs(got[k] - v).max() for k, v in state(net).items()):.3g}")
    return errs


if __name__ == "__main__":
    errs = {"init": init, "check": check}[sys.argv[1]](*sys.argv[2:])
    for e in errs:
        print("FAIL:", e)
    sys.exit(1 if errs else 0)
