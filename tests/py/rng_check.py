"""rng_check.py - the trainers' random values against tests/py/rng.py, an
independent NumPy implementation of the generator (t_random.sh).

    rng_check.py twin DIR SEED [A]
        tests/models/rng_twin.mp (A micro-batches a step, over all ranks:
        default 2) trained by the program (DIR/twin.jsonl,
        DIR/twin.safetensors, from DIR/init.safetensors on DIR/x.npy with
        --no-shuffle) against the same steps in NumPy (float64) with the
        values rng.py draws for each step k and micro-batch u: every logged
        loss, the eval loss and the trained weight. The draws of a micro-
        batch with the wrong step or micro-batch index, or of evaluation
        with a training index, differ in the first digit.
    rng_check.py predict FILE PLAN.json NAME SEED STEP
        FILE (--predict --output NAME, a randn / rand value [N, ...]) is, batch
        b of B rows by batch b, the draw of (SEED, STEP, micro -1 - b, node
        of NAME in the plan): rand bit for bit, randn within 2e-6.
    rng_check.py init DIR     writes DIR/x.npy and DIR/init.safetensors
    rng_check.py vae Z.npy MU.npy LOGVAR.npy PLAN.json SEED STEP B
        examples/vae.mp's z from --predict is mu + exp(logvar / 2) eps with
        eps the evaluation stream's draw of node NODE (f16 rounding aside)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import rng  # noqa: E402
import st  # noqa: E402

B, D, N, LR, ACC = 4, 6, 128, 0.1, 2


def node_of(plan_json, name):
    nodes = json.load(open(plan_json))["nodes"]
    return next(n["id"] for n in nodes if n.get("name") == name and n["op"] in ("randn", "rand"))


def loss_grad(w, x, e, u):
    y = x @ w.T
    n = y.size
    loss = (y * e).sum() / n + (y * y * u).sum() / n
    dy = e / n + 2 * y * u / n
    return loss, dy.T @ x


def twin(d, seed, acc=ACC):
    seed, acc = int(seed), int(acc)
    x = np.load(f"{d}/x.npy").astype(np.float64)
    w = st.read(f"{d}/init.safetensors")["y.weight"].astype(np.float64)
    ne, nu = node_of(f"{d}/plan.json", "e"), node_of(f"{d}/plan.json", "u")
    log = [json.loads(l) for l in open(f"{d}/twin.jsonl") if l.strip()]
    steps = {o["step"]: o for o in log if "eval" not in o}
    evals = [o for o in log if "eval" in o]
    errs = []

    def draws(step, micro):
        e = rng.randn(seed, step, micro, ne, B * D).reshape(B, D)
        u = rng.rand(seed, step, micro, nu, B * D).reshape(B, D).astype(np.float64)
        return e, u

    for k in range(1, max(steps) + 1):
        losses, g = [], np.zeros_like(w)
        for m in range(acc):
            first = ((k - 1) * acc + m) * B
            l, gm = loss_grad(w, x[first:first + B], *draws(k, m))
            losses.append(l)
            g += gm / acc
        want = sum(losses) / acc
        got = steps[k]["loss"]
        print(f"  step {k}: loss {got:.7g}, NumPy twin {want:.7g}")
        if abs(got - want) > 1e-5 * max(1.0, abs(want)):
            errs.append(f"step {k}: loss {got} vs twin {want}")
        w = w - LR * g
    got_w = st.read(f"{d}/twin.safetensors")["y.weight"].astype(np.float64)
    dw = np.abs(got_w - w).max()
    print(f"  trained weight: max difference {dw:.3g}")
    if dw > 1e-5:
        errs.append(f"trained weight differs by {dw}")
    # evaluation: batch b draws as micro-batch -1 - b at the trainer's step
    k = max(steps)
    want = np.mean([loss_grad(w, x[b * B:(b + 1) * B], *draws(k, -1 - b))[0] for b in range(N // B)])
    got = evals[-1]["eval"]["loss"]
    print(f"  eval loss {got:.7g}, NumPy twin {want:.7g}")
    if abs(got - want) > 1e-5 * max(1.0, abs(want)):
        errs.append(f"eval loss {got} vs twin {want}")
    return errs


def predict(path, plan, name, seed, step):
    node = node_of(plan, name)
    kind = next(n["op"] for n in json.load(open(plan))["nodes"] if n["id"] == node)
    a = np.load(path)
    rows = a.shape[0]
    per = a[0].size
    flat = a.reshape(rows, per)
    errs = []
    for b in range((rows + B - 1) // B):
        real = min(B, rows - b * B)
        fn = rng.rand if kind == "rand" else rng.randn
        want = fn(int(seed), int(step), -1 - b, int(node), B * per).reshape(B, per)[:real]
        got = flat[b * B:b * B + real]
        if kind == "rand" and not np.array_equal(got, want):
            errs.append(f"batch {b}: rand values differ from rng.py's")
        if kind == "randn" and np.abs(got - want).max() > 2e-6:
            errs.append(f"batch {b}: randn values differ from rng.py's by {np.abs(got - want).max()}")
    print(f"  {path}: {rows} samples of {per} {kind} values checked")
    return errs


def vae(pred, mu, logvar, plan, seed, step, bsz):
    node = next(n["id"] for n in json.load(open(plan))["nodes"] if n["op"] == "randn")
    z, mu, logvar = np.load(pred), np.load(mu).astype(np.float64), np.load(logvar).astype(np.float64)
    bsz = int(bsz)
    rows, per = z.shape
    eps = np.concatenate([rng.randn(int(seed), int(step), -1 - b, int(node), bsz * per).reshape(bsz, per)
                          for b in range((rows + bsz - 1) // bsz)])[:rows]
    want = mu + np.exp(0.5 * logvar) * eps
    d = np.abs(z - want).max()
    print(f"  vae z of {rows} samples: max difference from mu + sigma eps {d:.3g}")
    return [] if d < 1e-4 * max(1.0, np.abs(want).max()) else [f"vae z differs by {d}"]


def init(d):
    r = np.random.default_rng(3)
    np.save(f"{d}/x.npy", r.standard_normal((N, D)).astype(np.float32))
    st.write(f"{d}/init.safetensors", {"y.weight": (0.3 * r.standard_normal((D, D))).astype(np.float32)})
    return []


if __name__ == "__main__":
    cmd = {"twin": twin, "predict": predict, "init": init, "vae": vae}[sys.argv[1]]
    errs = cmd(*sys.argv[2:])
    for e in errs:
        print("FAIL:", e)
    sys.exit(1 if errs else 0)
