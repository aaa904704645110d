"""ref.py - the PyTorch side of the end-to-end checks.

    ref.py init MODEL.mp OUT.safetensors [--seed N]
        Writes the twin's (models.py) torch-default initial parameters and
        buffers under the model's names: the --init file of a trainer run.
    ref.py batch FILE
        Runs the init and check command lines of FILE (one per line) in one
        process (torch starts once); see cmd_batch.
    ref.py check MODEL.mp --data NAME=F.npy ... --steps N --init INIT
                 --log LOG.jsonl --ckpt OUT.safetensors [--eval NAME=F.npy ...]
                 [--tol 1e-4] [--dtype float32|float64] [--vs-float32 K --ptol F]
        Trains the twin exactly as the trainer was asked to (batches in file
        order, the train block's optimizer, schedule, clipping, accumulate)
        and compares, step by step, the trainer's logged loss and lr with
        its own; then the trainer's final checkpoint against its own
        parameters and optimizer state, and, with --eval, loads the
        checkpoint into the twin with load_state_dict and compares its
        evaluation with the trainer's last eval log line. --vs-float32 K
        (with --dtype float64) trains float32 twins too and gives each
        final tensor the tolerance K x their own difference from the
        float64 one + --ptol of its change from init (compare_tensors).
Exit status 0 when everything agrees, 1 with the disagreements listed.

How the trainer is defined (TRAINER.md; the schedule as in the runtime's
mp_optim.h): step k (1-based) trains on micro-batches (k-1)*A .. k*A-1 of
the file order (A = accumulate), each batch j holding samples
(j mod floor(N/B))*B ...; the loss logged for step k is the mean over its
micro-batches, before the update; gradients are the mean over them.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import arch  # noqa: E402
import models  # noqa: E402
import mpfile  # noqa: E402
import st  # noqa: E402

TORCH_INPUT = {np.dtype("uint8"): torch.uint8, np.dtype("int32"): torch.int32,
               np.dtype("uint16"): torch.int32,     # torch 1.13 has no uint16: ids widened
               np.dtype("float32"): torch.float32, np.dtype("float16"): torch.float16}
NP_INPUT = {"u8": "u1", "u16": "<u2", "i32": "<i4", "f32": "<f4", "f16": "<f2"}
TWINS = {**models.TWINS, **arch.TWINS}


def twin(mp):
    cls = TWINS.get(mp["name"])
    if cls is None:
        sys.exit(f"ref.py: no PyTorch twin for model '{mp['name']}' in models.py or arch.py")
    return cls(**mp["consts"])


def model_state(module):
    """The state_dict as the trainer names it: no num_batches_tracked, and a
    tied tensor once, under the name the model file uses (twin.tied)."""
    tied = getattr(module, "tied", {})
    return {k: v for k, v in module.state_dict().items()
            if not k.endswith("num_batches_tracked") and k not in tied}


def nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT's train.py get_lr, as it is written there."""
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


def sched_lr(tr, k):
    """LR of optimizer step k (1-based), mirroring mp_optim.h; with
    warmup_style "nanogpt", nanoGPT's get_lr at it = k - 1 (LANGUAGE.md)."""
    name, kw, _ = mpfile.call(tr.get("lr_schedule"), "constant")
    lr = mpfile.call(tr["optimizer"])[1]["lr"]
    if name == "constant":
        return lr
    w, t, lo = kw.get("warmup", 0), tr.get("steps", 1000), kw.get("min", 0)
    nanogpt = kw.get("warmup_style", "torch") == "nanogpt"
    if nanogpt and name == "cosine":
        return nanogpt_get_lr(k - 1, lr, w, t, lo)
    if w > 0 and k <= w:
        return lr * k / (w + 1 if nanogpt else w)
    p = min(max((k - 1 - w) / (t - w), 0), 1) if t > w else 1
    if name == "linear":
        return lr * (1 - p)
    return lo + (lr - lo) * (1 + math.cos(math.pi * p)) / 2


def param_groups(kw, named):
    """The optimizer's no_decay patterns as torch parameter groups: the
    parameters a pattern matches get weight_decay 0. A pattern is a glob
    ('*': any run of characters, dots included) or vectors (rank <= 1);
    mpfile reads the bare word as the string "vectors"."""
    pats = kw.get("no_decay")
    if not pats:
        return [p for _, p in named]

    def hit(n, p):
        return any(p.dim() <= 1 if x == "vectors" else
                   re.fullmatch(".*".join(map(re.escape, x.split("*"))), n) for x in pats)
    return [{"params": [p for n, p in named if not hit(n, p)]},
            {"params": [p for n, p in named if hit(n, p)], "weight_decay": 0.0}]


def optimizer(tr, named):
    name, kw, _ = mpfile.call(tr["optimizer"])
    lr = kw["lr"]
    params = param_groups(kw, named)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=kw.get("momentum", 0),
                               nesterov=kw.get("nesterov", False),
                               weight_decay=kw.get("weight_decay", 0))
    betas = (kw.get("beta1", 0.9), kw.get("beta2", 0.999))
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=kw.get("eps", 1e-8),
                                weight_decay=kw.get("weight_decay", 0))
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=kw.get("eps", 1e-8),
                                 weight_decay=kw.get("weight_decay", 0.01))
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=kw.get("alpha", 0.99), eps=kw.get("eps", 1e-8),
                                   momentum=kw.get("momentum", 0), centered=kw.get("centered", False),
                                   weight_decay=kw.get("weight_decay", 0))
    sys.exit(f"ref.py: unknown optimizer {name}")


def load_data(pairs, mp=None):
    """{input: array}; a raw .bin file holds little-endian values of the
    input's declared type (a window input's token stream)."""
    out = {}
    for p in pairs or []:
        k, f = p.split("=", 1)
        out[k] = np.fromfile(f, NP_INPUT[mp["inputs"][k][0]]) if f.endswith(".bin") else np.load(f)
    return out


def windows(mp, data):
    """The rows of a model whose inputs are window inputs (TRAINER.md): window
    i of a stream of N values starts at i*(W-1), for the
    floor((N - W)/(W - 1)) + 1 windows that fit; as {input: [n, W] array}."""
    if not any(mp["inputs"][k][2] for k in data):
        return data
    out = {}
    for k, a in data.items():
        w = mp["inputs"][k][1][1]
        n = (len(a) - w) // (w - 1) + 1
        out[k] = np.lib.stride_tricks.as_strided(a, (n, w), ((w - 1) * a.strides[0], a.strides[0]))
    return out


def to_torch(a):
    a = np.ascontiguousarray(a)
    return torch.from_numpy(a.astype(np.int32) if a.dtype == np.uint16 else a).to(TORCH_INPUT[a.dtype])


def batches(data, bsz, mp=None):
    """Batch j of the file order (wrapping round), as torch tensors, and the
    number of full batches. Window inputs: rows are windows in order,
    wrapping round row by row (a batch may span the wrap)."""
    wins = mp is not None and windows(mp, data) is not data
    rows = windows(mp, data) if wins else data
    total = min(len(a) for a in rows.values())
    n = total // bsz

    def get(j):
        if wins:
            idx = (np.arange(bsz) + j * bsz) % total
        else:
            idx = np.arange((j % n) * bsz, (j % n) * bsz + bsz)
        return {k: to_torch(a[idx]) for k, a in rows.items()}
    return get, n


def read_log(path):
    train, evals = {}, []
    with open(path) as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                if "eval" in o:
                    evals.append(o)
                elif "loss" in o:
                    train[o["step"]] = o
    return train, evals


def batch_size(mp):
    return next(iter(mp["inputs"].values()))[1][0]


def train_twin(mp, net, data, steps, dtype, log=None, emulate=False):
    """Trains net in place; returns (per-step losses, per-step lr, optimizer).
    Steps the trainer's log says it skipped (loss scaling) are skipped too:
    no update, but the schedule moves on. With emulate, the twin's lowp
    plan runs at the loss scale the log says each step used (it decides
    which gradients underflow or round)."""
    tr = mp["train"]
    acc = tr.get("accumulate", 1)
    clip = tr.get("clip_grad_norm", 0)
    opt = optimizer(tr, list(net.named_parameters()))
    base = mpfile.call(tr["optimizer"])[1]["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: sched_lr(tr, e + 1) / base)
    get, _ = batches(data, batch_size(mp), mp)
    losses, lrs = [], []
    net.grad_max = {n: 0.0 for n, _ in net.named_parameters()}
    net.train()
    for k in range(1, steps + 1):
        opt.zero_grad()
        micro = []
        scale = log[k].get("loss_scale", 1) if log and k in log and emulate else 1
        for m in range(acc):
            loss, _ = net(get((k - 1) * acc + m))
            (loss * (scale / acc)).backward()
            micro.append(loss.item())
        if scale != 1:
            for p in net.parameters():
                p.grad.mul_(1 / scale)
        losses.append(sum(micro) / acc)
        for n, p in net.named_parameters():
            net.grad_max[n] = max(net.grad_max[n], float(p.grad.norm()) if p.grad is not None else 0.0)
        lrs.append(opt.param_groups[0]["lr"])
        skipped = log and k in log and log[k].get("skipped", 0) > log.get(k - 1, {}).get("skipped", 0)
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        if not skipped:
            opt.step()
        if getattr(net, "fp8", None) is not None:
            net.fp8.step_end()      # mixed_float8's scales move on, skipped or not
        sched.step()
    return losses, lrs, opt


def evaluate(mp, net, data):
    """Loss and metrics over every sample (TRAINER.md: the last batch may be
    partial), each batch's means weighted by its rows; window inputs: over
    every evaluation window."""
    rows = windows(mp, data)
    b, total = batch_size(mp), min(len(a) for a in rows.values())
    parts = [({k: to_torch(a[s:s + b]) for k, a in rows.items()}, min(b, total - s))
             for s in range(0, total, b)]
    net.eval()
    tot, w = {}, 0
    with torch.no_grad():
        for batch, rows_in in parts:
            loss, mets = net(batch)
            for k, v in [("loss", loss)] + list(mets.items()):
                tot[k] = tot.get(k, 0.0) + float(v) * rows_in
            w += rows_in
    return {k: v / w for k, v in tot.items()}


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-6)


def compare_steps(log, losses, lrs, tol, errs):
    worst = 0.0
    print(f"{'step':>5} {'trainer':>12} {'torch':>12} {'rel.err':>9}")
    for k, (lt, lr) in enumerate(zip(losses, lrs), 1):
        if k not in log:
            errs.append(f"step {k}: no log line")
            continue
        lc = log[k]["loss"]
        e = rel(lc, lt)
        worst = max(worst, e)
        print(f"{k:5d} {lc:12.7g} {lt:12.7g} {e:9.2e}{'  <-- over ' + str(tol) if e > tol else ''}")
        if e > tol:
            errs.append(f"step {k}: loss {lc!r} vs torch {lt!r} (rel {e:.2e} > {tol})")
        if "lr" in log[k] and rel(log[k]["lr"], lr) > 1e-5:
            errs.append(f"step {k}: lr {log[k]['lr']!r} vs schedule {lr!r}")
    print(f"worst per-step relative loss difference: {worst:.3e} (tolerance {tol})")
    return worst


def final_tensors(net, opt):
    """The model state and optimizer slots, in float64, by checkpoint name."""
    out = {k: v.detach().double().numpy() for k, v in model_state(net).items()}
    for n, p in net.named_parameters():
        for slot, v in opt.state.get(p, {}).items():
            if slot != "step" and v is not None:
                out[f"optimizer.{slot}.{n}"] = v.double().numpy()
    return out


def compare_tensors(ckpt, net, opt, init, ptol, errs, f32s=(), k32=0):
    """Final parameters (as a relative error of the update from init) and
    optimizer state against the twin's. A parameter whose gradient is
    rounding noise all along (e.g. an attention key bias: softmax ignores
    it) is not compared: Adam turns noise into full-size steps.
    With f32s (float32 twins' final_tensors, net in float64), each tensor's
    tolerance is k32 times the float32 twins' largest difference from
    float64 plus ptol of the change: what float32 determines of that
    tensor, measured, instead of one threshold for all."""
    top = max(net.grad_max.values())
    noise = {n for n, g in net.grad_max.items() if g < 1e-5 * top}
    if noise:
        print(f"not compared (gradient below 1e-5 of the largest, i.e. rounding noise): {sorted(noise)}")
    worst, where, worst_e = 0.0, "", 0.0    # the largest e / tol, its tensor, the largest e
    for k, t in final_tensors(net, opt).items():
        if (k.split(".", 2)[2] if k.startswith("optimizer.") else k) in noise:
            continue
        if k not in ckpt:
            errs.append(f"checkpoint lacks '{k}'")
            continue
        c = ckpt[k].astype(np.float64)
        if c.shape != t.shape:
            errs.append(f"checkpoint '{k}': shape {list(c.shape)} vs torch {list(t.shape)}")
            continue
        ref = max(np.linalg.norm(t - init[k] if k in init else t), 1e-12)
        e = np.linalg.norm(c - t) / ref
        e32 = max((np.linalg.norm(f[k] - t) / ref for f in f32s), default=0.0)
        tol = k32 * e32 + ptol
        worst_e = max(worst_e, e)
        if e / tol > worst:
            worst, where = e / tol, k
        if e > tol:
            how = f" ({k32} x torch float32's {e32:.2e} + {ptol})" if f32s else ""
            errs.append(f"checkpoint '{k}': relative difference {e:.2e} > {tol:.2e}{how} from torch")
    if f32s:
        print(f"worst tensor difference over its tolerance ({k32} x torch float32's own + {ptol} "
              f"of the change from init): {worst:.3f} ('{where}')")
    else:
        print(f"worst tensor difference (relative to its change from init): {worst_e:.3e} (tolerance {ptol})")


# The float32 twins of --vs-float32: torch's CPU summation orders (threads,
# oneDNN or its native kernels). The ill-determined tensors (a gradient
# that is mostly cancellation) vary tenfold between them (measured on
# MobileNetV2: 4.5e-4 to 3e-2 of the change), so the yardstick is the
# largest, not one order's luck.
FLOAT32_ORDERS = ((1, True), (1, False), (2, True))


def float32_twins(mp, init, data, steps, log):
    out = []
    was = torch.get_num_threads(), torch.backends.mkldnn.enabled   # the batch's other checks keep theirs
    try:
        for threads, onednn in FLOAT32_ORDERS:
            torch.set_num_threads(threads)
            torch.backends.mkldnn.enabled = onednn
            net, _ = check_load(init, mp, torch.float32)
            _, _, opt = train_twin(mp, net, data, steps, torch.float32, log)
            out.append(final_tensors(net, opt))
    finally:
        torch.set_num_threads(was[0])
        torch.backends.mkldnn.enabled = was[1]
    return out


def check_load(ckpt, mp, dtype):
    """The checkpoint's model tensors load into a fresh twin by name."""
    net = twin(mp).to(dtype)
    state = {k: torch.from_numpy(v.copy()).to(dtype) for k, v in ckpt.items()
             if not k.startswith(("optimizer.", "fp8."))}
    for alias, name in getattr(net, "tied", {}).items():   # the tie, as the examples' headers say
        if name in state:
            state[alias] = state[name]
    res = net.load_state_dict(state, strict=False)
    bad = [k for k in res.missing_keys if not k.endswith("num_batches_tracked")] + list(res.unexpected_keys)
    return net, bad


def cmd_init(a):
    mp = mpfile.read(a.model)
    torch.manual_seed(a.seed)
    net = twin(mp)
    st.write(a.out, {k: v.numpy() for k, v in model_state(net).items()})


def cmd_check(a):
    mp = mpfile.read(a.model)
    dtype = getattr(torch, a.dtype)
    torch.set_num_threads(1)
    init = st.read(a.init)
    net, bad = check_load(init, mp, dtype)
    if bad:
        sys.exit(f"ref.py: {a.init} does not fit the twin: {bad}")
    if a.emulate == "tf32":
        if not hasattr(net, "tf32"):
            sys.exit(f"ref.py: the twin of '{mp['name']}' cannot emulate float32_matmul tf32")
        net.tf32 = True
    elif a.emulate == "fp8":
        if not hasattr(net, "fp8"):
            sys.exit(f"ref.py: the twin of '{mp['name']}' cannot emulate mixed_float8")
        name, kw, _ = mpfile.call(mp["train"].get("fp8"), "delayed")
        net.lowp, net.fp8 = torch.bfloat16, models.Fp8Scales(name, **kw)
    elif a.emulate:
        if not hasattr(net, "lowp"):
            sys.exit(f"ref.py: the twin of '{mp['name']}' cannot emulate a lowp plan")
        net.lowp = {"f16": torch.float16, "bf16": torch.bfloat16}[a.emulate]
    errs = []
    log, evals = read_log(a.log)
    losses, lrs, opt = train_twin(mp, net, load_data(a.data, mp), a.steps, dtype, log, bool(a.emulate))
    worst = compare_steps(log, losses, lrs, a.tol, errs)
    if worst < a.min_diff:
        errs.append(f"the losses differ from torch by at most {worst:.2e}, less than {a.min_diff}: "
                    "was the model really trained in low precision?")
    ckpt, meta = st.read(a.ckpt, with_meta=True)
    if str(meta.get("step")) != str(a.steps):
        errs.append(f"checkpoint metadata step {meta.get('step')!r}, expected {a.steps}")
    f32s = ()
    if a.vs_float32:
        if a.dtype != "float64" or a.emulate:
            sys.exit("ref.py: --vs-float32 measures float32 against a float64 twin (--dtype float64)")
        f32s = float32_twins(mp, init, load_data(a.data, mp), a.steps, log)
    if a.ptol > 0:
        compare_tensors(ckpt, net, opt, {k: v.astype(np.float64) for k, v in init.items()}, a.ptol, errs,
                        f32s, a.vs_float32)
    if getattr(net, "fp8", None) is not None:    # mixed_float8: the scales, slot by slot
        mine, theirs = list(net.fp8.exp.values()), ckpt.get("fp8.scale_exp")
        if theirs is None or [float(e) for e in mine] != [float(e) for e in theirs]:
            errs.append(f"fp8.scale_exp: trainer {None if theirs is None else theirs.tolist()}, twin {mine}")
        if str(meta.get("fp8_steps")) != str(a.steps):
            errs.append(f"checkpoint metadata fp8_steps {meta.get('fp8_steps')!r}, expected {a.steps}")
        print(f"fp8: the {len(mine)} scales' exponents equal the twin's: {mine}" if not errs else "")
    loaded, bad = check_load(ckpt, mp, dtype)
    loaded.lowp = getattr(net, "lowp", None)    # evaluate as the trainer does
    loaded.tf32 = getattr(net, "tf32", False)
    loaded.fp8 = getattr(net, "fp8", None)      # the scales the trainer evaluates with
    if loaded.fp8 is not None:
        loaded.fp8.training = False
    if bad:
        errs.append(f"load_state_dict into torch: mismatched keys {bad}")
    if a.eval:
        mine = evaluate(mp, loaded, load_data(a.eval, mp))
        if not evals:
            errs.append("the trainer's log has no eval line")
        else:
            theirs = evals[-1]["eval"]
            print(f"eval: trainer {json.dumps(theirs)}  torch(load_state_dict) "
                  f"{json.dumps({k: round(v, 7) for k, v in mine.items()})}")
            for k, v in mine.items():
                if k not in theirs:
                    errs.append(f"eval: trainer did not report '{k}'")
                elif rel(theirs[k], v) > a.etol:
                    errs.append(f"eval {k}: trainer {theirs[k]!r} vs torch {v!r} (> {a.etol})")
    for e in errs:
        print("MISMATCH:", e)
    return 1 if errs else 0


def cmd_batch(a, parser):
    """Runs the init / check command lines of a file (one per line, shell
    quoting) in this one process; a check's output goes to its --report
    file and one summary line is printed. Exit 1 if any check failed."""
    import contextlib
    import io
    import shlex
    failed = []
    for line in open(a.file):
        if not line.strip():
            continue
        sub = parser.parse_args(shlex.split(line))
        if sub.cmd == "init":
            cmd_init(sub)
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                rc = cmd_check(sub)
            except (Exception, SystemExit) as e:  # a broken case must not stop the others
                print(f"MISMATCH: ref.py: {type(e).__name__}: {e}")
                rc = 1
        out = buf.getvalue()
        if sub.report:
            open(sub.report, "w").write(out)
        keep = [l for l in out.splitlines() if l.startswith(("worst", "MISMATCH", "eval:", "not compared"))]
        print(f"{'ok  ' if rc == 0 else 'FAIL'} {sub.report or sub.model}")
        for l in keep[:12]:
            print("     " + l)
        if rc:
            failed.append(sub.report or sub.model)
    if failed:
        print(f"{len(failed)} case(s) differ from PyTorch: " + " ".join(failed))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("check")
    p.add_argument("model")
    p.add_argument("--data", action="append", required=True)
    p.add_argument("--eval", action="append")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--ptol", type=float, default=1e-2, help="0: do not compare tensors")
    p.add_argument("--vs-float32", type=float, default=0, metavar="K",
                   help="with --dtype float64: the twin trained in float32 too (FLOAT32_ORDERS), and "
                   "each final tensor may differ from the float64 one by K times as much as "
                   "those do, plus --ptol of its change")
    p.add_argument("--etol", type=float, default=1e-4)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--emulate", choices=["f16", "bf16", "tf32", "fp8"],
                   help="the twin rounds as the mixed precision plan does (twins with `lowp`), "
                   "or its products' operands to TF32 (float32_matmul, twins with `tf32`), or "
                   "quantises them as mixed_float8 does (twins with `fp8`)")
    p.add_argument("--min-diff", type=float, default=0,
                   help="mixed precision: the losses must differ at least this much somewhere")
    p.add_argument("--report", help="(batch) where this check's output goes")
    p = sub.add_parser("batch")
    p.add_argument("file")
    a = ap.parse_args()
    sys.exit({"init": cmd_init, "check": cmd_check, "batch": lambda x: cmd_batch(x, ap)}[a.cmd](a))


if __name__ == "__main__":
    main()
