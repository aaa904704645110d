"""vs_report.py - the bookkeeping of bench/vs_frameworks.sh (numpy only).

    vs_report.py mpcc LOG.jsonl --mode PREC --model NAME --batch B --warmup W
                 --params N --out RESULT.json
        a generated trainer's --log-every 1 log as a result like those of
        vs_torch.py / vs_jax.py: the time of step k is B / samples_per_s of
        its log line (the trainer's clock between consecutive log lines),
        for the steps after the first W
    vs_report.py write RESULT.json ... --meta META.txt --profile DIR
                 --results RESULTS.md [--tol 5e-4] [--last-tol MODEL=TOL ...]
        merges the rounds of each framework and mode (their step times
        together), checks that the frameworks' float32 runs are the same
        training (equal parameter counts; first-step losses within --tol of
        each other, last-step losses within the model's --last-tol
        relative, 1e-2 for a model not named), prints the table and puts
        it, with META.txt and the profiles (DIR/*.txt), between the vs_frameworks markers of
        RESULTS.md (appended when the markers are not there yet).
        Exit status 1 when the check fails (RESULTS.md is then untouched).
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

BEGIN, END = "<!-- vs_frameworks begin -->", "<!-- vs_frameworks end -->"


def cmd_mpcc(a):
    lines = [json.loads(s) for s in open(a.log) if s.strip()]
    steps = {o["step"]: o for o in lines if "eval" not in o}
    if 1 not in steps or len(steps) <= a.warmup:
        sys.exit(f"vs_report.py: {a.log}: {len(steps)} step lines, expected more than {a.warmup}")
    ms = [1e3 * a.batch / steps[k]["samples_per_s"] for k in sorted(steps) if k > a.warmup]
    res = {"framework": "mpcc", "mode": a.mode, "model": a.model, "params": a.params,
           "loss1": steps[1]["loss"], "loss_last": steps[max(steps)]["loss"], "steps": max(steps),
           "step_ms": ms}
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(f"mpcc {a.mode} {a.model}: losses {res['loss1']:.6f} (first), {res['loss_last']:.6f} "
          f"(step {res['steps']}), "
          f"median {np.median(ms):.2f} ms/step over {len(ms)} steps")


def check(rs, tol, last_tol):
    """The float32 runs of one model must be the same training: the same
    forward pass (first losses) and the same updates (last losses)."""
    errs = []
    ref = [r for r in rs if r["mode"] == "float32"]
    if len({r["params"] for r in rs}) > 1:
        errs.append("parameter counts differ: " + ", ".join(f"{r['framework']} {r['params']}" for r in rs))
    for r in ref[1:]:
        if abs(r["loss1"] - ref[0]["loss1"]) > tol:
            errs.append(f"first-step loss: {r['framework']} {r['loss1']:.6f} against "
                        f"{ref[0]['framework']} {ref[0]['loss1']:.6f} (tolerance {tol})")
        if r["steps"] != ref[0]["steps"] or abs(r["loss_last"] / ref[0]["loss_last"] - 1) > last_tol:
            errs.append(f"loss at the last step: {r['framework']} {r['loss_last']:.6f} (step {r['steps']}) "
                        f"against {ref[0]['framework']} {ref[0]['loss_last']:.6f} (step {ref[0]['steps']}; "
                        f"relative tolerance {last_tol})")
    return errs


def table(model, rs):
    med = {(r["framework"].split()[0], r["mode"]): float(np.median(r["step_ms"])) for r in rs}
    jax_ms, torch_ms = med.get(("jax", "float32")), med.get(("torch", "float32"))
    f32 = [r for r in rs if r["mode"] == "float32"]
    first = [r["loss1"] for r in f32]
    last = [r["loss_last"] for r in f32]
    out = [f"**{model}** ({rs[0]['params']} parameters in each framework; the float32 runs' losses "
           f"within {max(first) - min(first):.1e} of each other at step 1, "
           f"{max(last) / min(last) - 1:.1e} relative at step {rs[0]['steps']})", "",
           f"| framework | mode | ms/step (median) | p10 - p90 | steps timed | loss at step 1 | at step {rs[0]['steps']} "
           "| speed vs JAX jit | speed vs PyTorch eager |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rs:
        m = float(np.median(r["step_ms"]))
        lo, hi = np.percentile(r["step_ms"], [10, 90])
        vs = lambda t: f"{t / m:.2f}x" if t else "-"  # noqa: E731
        out.append(f"| {r['framework']} | {r['mode']} | {m:.2f} | {lo:.2f} - {hi:.2f} | {len(r['step_ms'])} "
                   f"| {r['loss1']:.6f} | {r['loss_last']:.6f} | {vs(jax_ms)} | {vs(torch_ms)} |")
    return out


ORDER = ["mpcc float32", "mpcc mixed_float16", "mpcc mixed_bfloat16", "torch float32",
         "torch autocast_bf16", "jax float32"]


def rank(r):
    key = r["framework"].split()[0] + " " + r["mode"]
    return ORDER.index(key) if key in ORDER else len(ORDER)


def merge(results, tol):
    """{model: [result]}: the rounds of one framework and mode as one
    result (their step times together); errors if their first losses
    differ (each round starts from the same parameters and batches)."""
    runs, errs = {}, []
    for f in results:
        r = json.load(open(f))
        key = (r["model"], r["framework"], r["mode"])
        if key not in runs:
            runs[key] = r
            continue
        for k in ("loss1", "loss_last"):
            if abs(runs[key][k] - r[k]) > tol:
                errs.append(f"{' '.join(key)}: {k} {r[k]} in {f}, {runs[key][k]} in an earlier round")
        runs[key]["step_ms"] += r["step_ms"]
    by_model = {}
    for r in sorted(runs.values(), key=rank):
        by_model.setdefault(r["model"], []).append(r)
    return by_model, errs


def cmd_write(a):
    by_model, errs = merge(a.results, a.tol)
    md = []
    for model, rs in by_model.items():
        last_tol = float(dict(t.split("=", 1) for t in a.last_tol).get(model, 1e-2))
        errs += [f"{model}: {e}" for e in check(rs, a.tol, last_tol)]
        md += table(model, rs) + [""]
    print("\n".join(md))
    if errs:
        print("\n".join("FAIL: " + e for e in errs), file=sys.stderr)
        print("vs_report.py: the runs disagree (above); RESULTS.md left as it was", file=sys.stderr)
        return 1
    body = [BEGIN, "", open(a.meta).read().rstrip(), "", *md]
    for f in sorted(glob.glob(os.path.join(a.profile, "*.txt"))):
        body += [f"`{os.path.basename(f)[:-4]}`, top 10 symbols (perf, self time):", "", "```",
                 open(f).read().rstrip(), "```", ""]
    body.append(END)
    old = open(a.results_md).read() if os.path.exists(a.results_md) else ""
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + "\n".join(body) + old[old.index(END) + len(END):]
    else:
        new = old.rstrip() + "\n\n" + "\n".join(body) + "\n"
    with open(a.results_md, "w") as f:
        f.write(new)
    print(f"written to {a.results_md}")
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mpcc")
    m.add_argument("log")
    for k in ("mode", "model"):
        m.add_argument("--" + k, required=True)
    for k in ("batch", "warmup", "params"):
        m.add_argument("--" + k, type=int, required=True)
    m.add_argument("--out", required=True)
    w = sub.add_parser("write")
    w.add_argument("results", nargs="+")
    w.add_argument("--meta", required=True)
    w.add_argument("--profile", required=True)
    w.add_argument("--results", dest="results_md", required=True)
    w.add_argument("--tol", type=float, default=5e-4)
    w.add_argument("--last-tol", action="append", default=[], help="MODEL=relative tolerance")
    a = p.parse_args()
    if a.cmd == "mpcc":
        cmd_mpcc(a)
        return 0
    return cmd_write(a)


if __name__ == "__main__":
    sys.exit(main())
