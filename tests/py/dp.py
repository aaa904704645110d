"""dp.py - data parallel against one process (t_mpi.sh).

    dp.py log ONE.jsonl N.jsonl [REL]
        the same training steps logged; loss within REL (default 1e-6)
        relative, loss_scale, skipped and lr equal, grad_norm within 1e-5
        relative (its sum of squares runs over differently rounded sums);
        eval lines: loss and metrics equal to the last digit
    dp.py ckpt ONE.safetensors N.safetensors [REL [SUFFIX,...]]
        the same tensors; each within REL of the largest magnitude of its
        one-process values (max |a - b| <= REL * max |a|); metadata equal
        but for 'ranks', 'source' (the reference is compiled from a copy
        with accumulate N x A) and 'bn_batches_tracked' (each rank counts
        its own A forwards a step, the batch-norm statistics it keeps);
        tensors whose names end in one of the SUFFIXes are left out
        (running_mean,running_var: each rank's own, rank 0's saved)
Exit 1 listing the differences."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import st  # noqa: E402


def near(a, b, rel):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * abs(a)


def log(a, b, rel):
    def read(p):
        steps, evals = {}, {}
        for line in open(p):
            if line.strip():
                o = json.loads(line)
                (evals if "eval" in o else steps)[o["step"]] = o
        return steps, evals
    (sa, ea), (sb, eb) = read(a), read(b)
    errs = [] if sa and sorted(sa) == sorted(sb) else [f"steps logged differ: {sorted(sa)} vs {sorted(sb)}"]
    for k in sorted(set(sa) & set(sb)):
        x, y = sa[k], sb[k]
        for f in ("loss_scale", "skipped", "lr"):
            if x[f] != y[f]:
                errs.append(f"step {k}: {f} {x[f]} vs {y[f]}")
        for f, r in (("loss", rel), ("loss_avg", rel), ("grad_norm", 1e-5)):
            if not near(x[f], y[f], r):
                errs.append(f"step {k}: {f} {x[f]} vs {y[f]}")
    if sorted(ea) != sorted(eb) or any(ea[k] != eb[k] for k in ea):
        errs.append(f"eval lines differ: {list(ea.values())} vs {list(eb.values())}")
    return errs, f"{len(sa)} steps, {len(ea)} evaluations"


def ckpt(a, b, rel, skip=()):
    ta, ma = st.read(a, with_meta=True)
    tb, mb = st.read(b, with_meta=True)
    for t in (ta, tb):
        for k in [k for k in t if k.endswith(tuple(skip))]:
            del t[k]
    errs = [f"tensor '{k}' only in one" for k in sorted(set(ta) ^ set(tb))]
    worst = 0.0
    for k in sorted(set(ta) & set(tb)):
        x, y = ta[k].astype(np.float64), tb[k].astype(np.float64)
        scale = np.abs(x).max() if x.size else 0
        d = np.abs(x - y).max() if x.size else 0
        worst = max(worst, d / scale if scale else d)
        if x.shape != y.shape or d > rel * scale:
            errs.append(f"tensor '{k}': max |diff| {d:.3g}, {rel:g} x max |value| = {rel * scale:.3g}")
    for k in sorted((set(ma) | set(mb)) - {"ranks", "source", "bn_batches_tracked"}):
        if ma.get(k) != mb.get(k):
            errs.append(f"metadata '{k}': {ma.get(k)!r} vs {mb.get(k)!r}")
    return errs, f"{len(ta)} tensors, worst relative difference {worst:.2g}"


if __name__ == "__main__":
    rel = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-6
    skip = tuple(sys.argv[5].split(",")) if len(sys.argv) > 5 and sys.argv[1] == "ckpt" else ()
    errs, what = (ckpt(sys.argv[2], sys.argv[3], rel, skip) if sys.argv[1] == "ckpt"
                  else log(sys.argv[2], sys.argv[3], rel))
    for e in errs[:20]:
        print("DIFF:", e)
    print(f"{sys.argv[1]} {os.path.basename(sys.argv[2])} vs {os.path.basename(sys.argv[3])}: "
          f"{what}: {'equal' if not errs else f'{len(errs)} differences'}")
    sys.exit(1 if errs else 0)
