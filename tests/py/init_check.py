"""init_check.py - the initialisers of tests/models/inits.mp (a checkpoint
saved before any step) against torch.nn.init's formulas: torch draws the
same shapes with its own generator, and each pair must agree in range and
spread (mean within 4 standard errors of torch's, standard deviation within
3%; a uniform's extremes at its bound; a truncated normal inside its cut).

    init_check.py CHECKPOINT"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import st  # noqa: E402

torch.manual_seed(0)


def torch_init(name, shape):
    w = torch.empty(shape)
    if name == "he_out.weight":
        torch.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    elif name == "he_in.weight":
        torch.nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu")
    elif name == "heu_out.weight":
        torch.nn.init.kaiming_uniform_(w, mode="fan_out", nonlinearity="relu")
    elif name == "p":           # a plain param [200, 300] is x @ p's right operand: fan_in 200
        torch.nn.init.kaiming_uniform_(w.T, mode="fan_in", nonlinearity="relu")
    elif name == "gn.weight":
        torch.nn.init.xavier_normal_(w)
    elif name == "tn.weight":
        torch.nn.init.trunc_normal_(w, std=0.02, a=-0.04, b=0.04)
    elif name == "tn2.weight":
        torch.nn.init.trunc_normal_(w, std=1, a=-0.5, b=2)
    elif name.startswith("td."):   # nn.Linear(200, 300)'s own reset_parameters
        lin = torch.nn.Linear(200, 300)
        w = lin.weight.detach() if name.endswith("weight") else lin.bias.detach()
    elif name == "emb.weight":
        w = torch.nn.Embedding(500, 120).weight.detach()
    elif name.startswith("ln."):
        ln = torch.nn.LayerNorm(200)
        w = ln.weight.detach() if name.endswith("weight") else ln.bias.detach()
    return w.numpy()


def main(path):
    got = st.read(path)
    errs = []
    for name in sorted(got):
        g, t = got[name].astype(np.float64), torch_init(name, got[name].shape).astype(np.float64)
        line = (f"  {name:15s} mean {g.mean():+.4f} (torch {t.mean():+.4f})  std {g.std():.4f} "
                f"(torch {t.std():.4f})  range [{g.min():+.3f}, {g.max():+.3f}] "
                f"(torch [{t.min():+.3f}, {t.max():+.3f}])")
        print(line)
        if t.std() == 0:
            if not np.array_equal(g, t):
                errs.append(f"{name}: not torch's constant {t.flat[0]}")
            continue
        if abs(g.mean() - t.mean()) > 4 * t.std() / np.sqrt(g.size) + 1e-12:
            errs.append(f"{name}: mean {g.mean()} vs torch's {t.mean()}")
        if abs(g.std() / t.std() - 1) > 0.03:
            errs.append(f"{name}: standard deviation {g.std()} vs torch's {t.std()}")
        # a bounded law: the same bounds (to 2% of the spread); else the tails agree
        tol = 0.02 * (t.max() - t.min())
        if (name.startswith(("heu", "td", "tn")) or name == "p") and \
                (abs(g.min() - t.min()) > tol or abs(g.max() - t.max()) > tol):
            errs.append(f"{name}: range [{g.min()}, {g.max()}] vs torch's [{t.min()}, {t.max()}]")
    return errs


if __name__ == "__main__":
    errs = main(sys.argv[1])
    for e in errs:
        print("FAIL:", e)
    sys.exit(1 if errs else 0)
