"""prelude_twin.py - tests/models/prelude_ops.mp (every block of
compiler/prelude.mp, and cross_entropy / mse with reduction = "sum")
against torch.nn.functional, float32: the loss of the first step and each
parameter after one SGD step with lr = 1 (so the parameter's gradient).

    prelude_twin.py init DIR     DIR/{x,t,y}.npy and DIR/init.safetensors
    prelude_twin.py check DIR    DIR/run.jsonl, DIR/run.safetensors against torch"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import st  # noqa: E402

B, N = 8, 12
NAMES = ["relu6", "hardsigmoid", "hardswish", "leaky_relu", "elu", "softplus", "softplus_t",
         "log_sigmoid", "logsumexp", "logsumexp2", "var", "var2", "bce", "bce_logits", "bce_logits_pw", "l1",
         "smooth_l1", "huber", "mse", "ce", "ce_ignore"]


def loss_of(w, x, t, y):
    m = lambda z: torch.mean(z * t)  # noqa: E731
    z = {k: x * w[k] for k in NAMES}
    acts = m(F.relu6(z["relu6"])) + m(F.hardsigmoid(z["hardsigmoid"]))
    acts2 = m(F.hardswish(z["hardswish"])) + m(F.leaky_relu(z["leaky_relu"], 0.2))
    acts3 = m(F.elu(z["elu"], alpha=1.5)) + m(F.softplus(z["softplus"]))
    acts4 = m(F.softplus(z["softplus_t"], beta=2, threshold=5)) + m(F.logsigmoid(z["log_sigmoid"]))
    lse = torch.mean(torch.logsumexp(z["logsumexp"], 1)) + \
        torch.sum(torch.logsumexp(z["logsumexp2"], [0, 1], keepdim=True))
    var2 = torch.mean(torch.var(z["var"], 1, unbiased=True) * torch.mean(t, 1)) + \
        torch.sum(torch.var(z["var2"], [0, 1], unbiased=False, keepdim=True))
    bce = F.binary_cross_entropy(torch.sigmoid(z["bce"]), t) + \
        F.binary_cross_entropy_with_logits(z["bce_logits"], t)
    bce2 = F.binary_cross_entropy_with_logits(z["bce_logits_pw"], t, pos_weight=torch.tensor(2.5),
                                              reduction="sum")
    reg = F.l1_loss(z["l1"], t, reduction="sum") + F.smooth_l1_loss(z["smooth_l1"], t, beta=0.5)
    reg2 = F.huber_loss(z["huber"], t, delta=0.7, reduction="sum") + F.mse_loss(z["mse"], t, reduction="sum")
    ce = F.cross_entropy(z["ce"], y, reduction="sum") + \
        F.cross_entropy(z["ce_ignore"], y, ignore_index=3, reduction="sum")
    return acts + acts2 + acts3 + acts4 + lse + var2 + bce + bce2 + reg + reg2 + ce


def init(d):
    r = np.random.default_rng(7)
    x = (r.standard_normal((B, N)) * 3).astype(np.float32)   # across every kink and the threshold
    t = r.uniform(0.05, 0.95, (B, N)).astype(np.float32)
    y = r.integers(0, N, B).astype(np.int32)
    y[:3] = 3                                                  # some ignored labels
    np.save(f"{d}/x.npy", x)
    np.save(f"{d}/t.npy", t)
    np.save(f"{d}/y.npy", y)
    st.write(f"{d}/init.safetensors",
             {f"w_{k}": r.uniform(0.5, 1.5, N).astype(np.float32) for k in NAMES})
    return []


def check(d):
    w0 = st.read(f"{d}/init.safetensors")
    w = {k: torch.tensor(w0[f"w_{k}"], requires_grad=True) for k in NAMES}
    x, t = (torch.from_numpy(np.load(f"{d}/{n}.npy")) for n in ("x", "t"))
    y = torch.from_numpy(np.load(f"{d}/y.npy").astype(np.int64))
    loss = loss_of(w, x, t, y)
    loss.backward()
    log = [json.loads(line) for line in open(f"{d}/run.jsonl") if line.strip()]
    got = next(o["loss"] for o in log if o.get("step") == 1 and "eval" not in o)
    errs = []
    print(f"  loss {got:.7g}, PyTorch {loss.item():.7g}")
    if abs(got - loss.item()) > 1e-5 * abs(loss.item()):
        errs.append(f"loss {got} vs PyTorch {loss.item()}")
    after = st.read(f"{d}/run.safetensors")
    for k in NAMES:
        grad = w0[f"w_{k}"] - after[f"w_{k}"]           # SGD, lr = 1
        want = w[k].grad.numpy()
        dv = np.abs(grad - want).max()
        print(f"  {k:14s} gradient: largest difference {dv:.2g} (largest value {np.abs(want).max():.3g})")
        if dv > 1e-5 * max(1.0, np.abs(want).max()):
            errs.append(f"{k}: gradient differs from PyTorch's by {dv}")
    return errs


if __name__ == "__main__":
    errs = {"init": init, "check": check}[sys.argv[1]](*sys.argv[2:])
    for e in errs:
        print("FAIL:", e)
    sys.exit(1 if errs else 0)
