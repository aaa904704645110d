"""vs_common.py - what bench/vs_torch.py (Debian's python3 with torch) and
bench/vs_jax.py (the JAX virtual environment) share, numpy only: the
command line, the batches in file order, the timed loop and the result.

Both runners train the twin of a .mp model from the same --init file on
the same batches as the generated trainer run with --no-shuffle (batch j
is rows j*B .. j*B+B-1, wrapping round), time every step with
time.perf_counter (the batch gather included, as in the trainer's step),
and write one JSON object:
  {"framework", "mode", "model", "params", "loss1", "loss_last", "steps",
   "step_ms": [...]}
where loss1 and loss_last are the losses of the first and the last step
(each before its update), steps the count of steps, and step_ms the times
of the steps after the warm-up ones."""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import mpfile  # noqa: E402
import st  # noqa: E402


def parse_args(modes):
    p = argparse.ArgumentParser()
    p.add_argument("model", help="the .mp file")
    p.add_argument("--mode", choices=modes, default=modes[0])
    p.add_argument("--data", action="append", default=[], help="NAME=FILE.npy")
    p.add_argument("--init", required=True, help="initial parameters (safetensors)")
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    p.add_argument("--out", required=True, help="the result (JSON)")
    a = p.parse_args()
    a.mp = mpfile.read(a.model)
    a.arrays = {k: np.load(f, mmap_mode="r") for k, f in (d.split("=", 1) for d in a.data)}
    a.params = st.read(a.init)
    return a


def batch_size(mp):
    return next(iter(mp["inputs"].values()))[1][0]


def batches(arrays, bsz):
    """get(j): batch j of the file order as numpy arrays (the trainer's --no-shuffle)."""
    n = min(len(x) for x in arrays.values()) // bsz

    def get(j):
        lo = (j % n) * bsz
        return {k: np.array(x[lo:lo + bsz]) for k, x in arrays.items()}
    return get


def timed(a, step):
    """Runs step(j) -> loss (a scalar the runner's framework can turn into
    a float) for the warm-up and timed steps; returns the losses of the
    first and the last step (read after the clock stops) and the timed ms."""
    ms, losses = [], []
    n = a.warmup + a.steps
    for j in range(n):
        t0 = time.perf_counter()
        loss = step(j)
        t1 = time.perf_counter()
        if j in (0, n - 1):
            losses.append(float(loss))
        if j >= a.warmup:
            ms.append(1e3 * (t1 - t0))
    return losses[0], losses[-1], ms


def write(a, framework, nparams, losses, ms):
    """losses: of the first and the last step"""
    res = {"framework": framework, "mode": a.mode, "model": a.mp["name"], "params": int(nparams),
           "loss1": losses[0], "loss_last": losses[1], "steps": a.warmup + a.steps, "step_ms": ms}
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(f"{framework} {a.mode} {a.mp['name']}: {nparams} parameters, losses {losses[0]:.6f} (first), "
          f"{losses[1]:.6f} (step {a.warmup + a.steps}), "
          f"median {np.median(ms):.2f} ms/step over {len(ms)} steps")


def cpu_list(n):
    """n of the CPUs this process may use, on distinct cores where it can
    (hyperthread siblings share one core), comma-separated for taskset, or
    "" when that is all of them. `vs_common.py cpus N` prints it."""
    allowed = sorted(os.sched_getaffinity(0))
    seen, pick = set(), []
    for c in allowed:
        t = f"/sys/devices/system/cpu/cpu{c}/topology/"
        try:
            core = (open(t + "physical_package_id").read(), open(t + "core_id").read())
        except OSError:
            core = c
        if core not in seen:
            seen.add(core)
            pick.append(c)
    pick = (pick + [c for c in allowed if c not in pick])[:n]
    return "" if len(allowed) <= n else ",".join(map(str, pick))


if __name__ == "__main__" and sys.argv[1:2] == ["cpus"]:
    print(cpu_list(int(sys.argv[2])))
