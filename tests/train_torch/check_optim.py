"""check_optim.py - the runtime's optimizers and LR schedules against torch.

For each configuration, the same initial parameters (two tensors, 37 and
5x3 values) and the same gradients are fed, step by step, to torch.optim
(foreach=False, the reference single-tensor code) with
clip_grad_norm_ and a LambdaLR carrying the schedule's formula, and to
optim_drive (runtime/mp_optim.h). Every parameter after every step and
every lr must agree to 1e-6 relative. The schedule formula itself is checked
against torch's own CosineAnnealingLR and LinearLR where they coincide
(warmup 0). Usage: check_optim.py PATH/TO/optim_drive
"""
import math
import subprocess
import sys

import numpy as np
import torch

DRIVE = sys.argv[1]
STEPS = 40
SHAPES = [(37,), (5, 3)]
N = sum(int(np.prod(s)) for s in SHAPES)


def factor(sched, k, warmup, total, lr, lr_min):
    """The lr of step k (1-based), as documented in runtime/mp_optim.h."""
    if sched == "constant":
        return lr
    if warmup > 0 and k <= warmup:
        return lr * k / warmup
    p = (k - 1 - warmup) / (total - warmup) if total > warmup else 1.0
    p = min(max(p, 0.0), 1.0)
    if sched == "linear":
        return lr * (1 - p)
    return lr_min + (lr - lr_min) * (1 + math.cos(math.pi * p)) / 2


def torch_run(cfg, p0, grads):
    params = []
    at = 0
    for s in SHAPES:
        n = int(np.prod(s))
        params.append(torch.nn.Parameter(torch.tensor(p0[at:at + n].reshape(s))))
        at += n
    opt = cfg["opt"]
    if opt == "sgd":
        o = torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                            nesterov=bool(cfg["nesterov"]), weight_decay=cfg["wd"],
                            dampening=cfg["dampening"], foreach=False)
    elif opt == "rmsprop":
        o = torch.optim.RMSprop(params, lr=cfg["lr"], alpha=cfg["alpha"], eps=cfg["eps"],
                                weight_decay=cfg["wd"], momentum=cfg["momentum"],
                                centered=bool(cfg["centered"]), foreach=False)
    else:
        cls = torch.optim.Adam if opt == "adam" else torch.optim.AdamW
        o = cls(params, lr=cfg["lr"], betas=(cfg["b1"], cfg["b2"]), eps=cfg["eps"],
                weight_decay=cfg["wd"], foreach=False)
    lam = lambda e: factor(cfg["sched"], e + 1, cfg["warmup"], STEPS, 1.0, cfg["min"] / cfg["lr"])
    sch = torch.optim.lr_scheduler.LambdaLR(o, lam)
    lrs, traj = [], []
    for k in range(STEPS):
        at = 0
        for p, s in zip(params, SHAPES):
            n = int(np.prod(s))
            p.grad = torch.tensor(grads[k, at:at + n].reshape(s))
            at += n
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg["clip"])
        lrs.append(o.param_groups[0]["lr"])
        o.step()
        sch.step()
        traj.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    return np.array(lrs), np.array(traj)


def drive_run(cfg, p0, grads):
    args = [DRIVE, cfg["opt"], repr(cfg["lr"]), repr(cfg["momentum"]), str(cfg["nesterov"]),
            repr(cfg["wd"]), repr(cfg["b1"]), repr(cfg["b2"]), repr(cfg["eps"]), cfg["sched"],
            repr(cfg["warmup"]), repr(cfg["min"]), str(STEPS), repr(cfg["clip"]), str(N),
            repr(cfg["dampening"]), repr(cfg["alpha"]), str(cfg["centered"])]
    inp = p0.astype("<f4").tobytes() + grads.astype("<f4").tobytes()
    out = subprocess.run(args, input=inp, stdout=subprocess.PIPE, check=True).stdout
    rec = np.dtype([("lr", "<f8"), ("p", "<f4", (N,))])
    r = np.frombuffer(out, dtype=rec)
    assert len(r) == STEPS, f"optim_drive wrote {len(r)} steps"
    return r["lr"], r["p"]


def close(a, b, scale):
    """1e-6 relative; values that cancel to near 0 are judged against the
    parameters' typical size instead of their own."""
    return np.abs(a - b) <= 1e-6 * np.maximum(np.abs(b), scale)


def base(**kw):
    cfg = dict(opt="sgd", lr=0.1, momentum=0.0, nesterov=0, wd=0.0, b1=0.9, b2=0.999,
               eps=1e-8, sched="constant", warmup=0, min=0.0, clip=0.0, dampening=0.0,
               alpha=0.99, centered=0)
    cfg.update(kw)
    return cfg


CONFIGS = {
    "sgd": base(),
    "sgd momentum wd": base(momentum=0.9, wd=0.01),
    "sgd nesterov wd": base(momentum=0.9, nesterov=1, wd=1e-3, lr=0.05),
    "sgd momentum dampening wd": base(momentum=0.9, dampening=0.3, wd=0.01),
    "sgd momentum linear warmup": base(momentum=0.8, sched="linear", warmup=5),
    "adam": base(opt="adam", lr=1e-2),
    "adam wd betas eps": base(opt="adam", lr=3e-3, wd=0.1, b1=0.8, b2=0.99, eps=1e-6),
    "adam clip": base(opt="adam", lr=1e-2, clip=0.5),
    "adamw": base(opt="adamw", lr=1e-2, wd=0.01),
    "adamw cosine warmup min": base(opt="adamw", lr=1e-2, wd=0.05, sched="cosine", warmup=5, min=1e-4),
    "adamw linear warmup clip": base(opt="adamw", lr=2e-2, sched="linear", warmup=8, clip=1.0),
    "sgd cosine": base(momentum=0.5, sched="cosine", min=0.01),
    "rmsprop": base(opt="rmsprop", lr=1e-2),
    "rmsprop alpha eps wd": base(opt="rmsprop", lr=3e-3, alpha=0.9, eps=1e-6, wd=0.1),
    "rmsprop momentum": base(opt="rmsprop", lr=1e-3, momentum=0.9),
    "rmsprop centered": base(opt="rmsprop", lr=1e-3, centered=1, alpha=0.95),
    "rmsprop centered momentum wd clip": base(opt="rmsprop", lr=1e-3, centered=1, momentum=0.5,
                                              wd=0.01, clip=1.0, sched="cosine", warmup=4),
}


def check_builtin_schedulers():
    """With warmup 0 the formula is torch's own CosineAnnealingLR / LinearLR."""
    bad = 0
    for sched, make in [("cosine", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, STEPS, eta_min=0.01)),
                        ("linear", lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.0, total_iters=STEPS))]:
        o = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        s = make(o)
        for k in range(1, STEPS + 1):
            want = o.param_groups[0]["lr"]
            got = factor(sched, k, 0, STEPS, 0.1, 0.01)
            if abs(want - got) > 1e-12:
                print(f"FAIL {sched}: step {k}: torch lr {want}, formula {got}")
                bad += 1
            o.step()
            s.step()
    return bad


def main():
    rng = np.random.default_rng(1234)
    failures = check_builtin_schedulers()
    for name, cfg in CONFIGS.items():
        p0 = rng.normal(0, 1, N).astype(np.float32)
        grads = (rng.normal(0, 1, (STEPS, N)) * np.linspace(0.01, 3, N)).astype(np.float32)
        tl, tp = torch_run(cfg, p0, grads)
        dl, dp = drive_run(cfg, p0, grads)
        scale = float(np.mean(np.abs(p0)))
        ok_p = close(dp, tp, scale)
        ok_l = np.abs(dl - tl) <= 1e-9 * np.maximum(np.abs(tl), 1e-12)
        worst = float(np.max(np.abs(dp - tp) / np.maximum(np.abs(tp), scale)))
        if ok_p.all() and ok_l.all():
            print(f"ok   {name}: {STEPS} steps, worst relative error {worst:.2e}")
            continue
        failures += 1
        k, i = np.argwhere(~ok_p)[0] if not ok_p.all() else (int(np.argmin(ok_l)), 0)
        print(f"FAIL {name}: step {k + 1}, value {i}: runtime {dp[k, i]!r} lr {dl[k]!r}, "
              f"torch {tp[k, i]!r} lr {tl[k]!r}")
    print(f"{len(CONFIGS)} configurations, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
