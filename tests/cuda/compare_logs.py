#!/usr/bin/env python3
"""compare_logs.py A.jsonl B.jsonl TOL - two trainers' JSONL logs agree:
the same lines in the same order; step, loss_scale, skipped and
mixed_float8's scale exponents (fp8_exp_min, fp8_exp_max) equal; the
loss, evaluation losses and metrics within TOL relative (of the larger
magnitude, at least 1e-3), but accuracies (a fraction of samples: metrics
named accuracy or acc) within ACC_TOL absolute: the argmax of two nearly
tied logits may flip with the last bits of a sum, so the two programs may
count a sample apart (char_transformer: 1 of 3072 tokens; emu_additions,
whose attention backward on Tensor Cores takes rowsum(dy y) where the C
program sums P dP: 1 of 384); timings, learning rates and gradient
norms not compared. Prints the worst relative difference; exits 1 with the first
disagreement. Used by tests/t_cuda_emu.sh and bench/gpu_check.sh.

compare_logs.py A B TOL STRICT DRIFT: lines up to step STRICT as above;
after it, the steps still equal but the losses and metrics within DRIFT
relative, and loss_scale and skipped not compared. Two programs that sum
in different orders (cuBLAS against the C program) agree to TOL for the
first steps, then drift apart as training amplifies the difference: a
model near a float16 overflow can skip a step in one and not the other.

compare_logs.py A B TOL STRICT DRIFT A2 FACTOR: as the above, but after
step STRICT a loss or metric may also differ by up to FACTOR times the
largest relative difference, up to that line, between A and A2: A's
program run again from initial parameters nudged by one ulp
(bench/nudge.py). A training that amplifies a last-bit difference
(batch norm over 1 x 1 maps, a diverging loss) parts from itself as fast
as from another program; one that does not keeps DRIFT's bound."""
import json
import sys

ACC_TOL = 3e-3
UNCOMPARED = ("samples_per_s", "grad_norm", "lr", "step")


def flat(d, p=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, p + k + ".")
        else:
            yield p + k, v


def rel(u, v):
    return abs(u - v) / max(abs(u), abs(v), 1e-3)


def envelope(la, le):
    """per line of la, per number: the largest relative difference between
    la and le up to that line (le: la's program from nudged parameters)"""
    if len(la) != len(le):
        sys.exit("%d log lines against %d in the nudged run" % (len(la), len(le)))
    top, env = {}, []
    for x, y in zip(la, le):
        fy = dict(flat(y))
        for k, u in flat(x):
            v = fy.get(k)
            if isinstance(u, (int, float)) and isinstance(v, (int, float)) and k not in UNCOMPARED:
                top[k] = max(top.get(k, 0.0), rel(u, v))
        env.append(dict(top))
    return env


def main():
    a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    strict = int(sys.argv[4]) if len(sys.argv) > 4 else None
    drift = float(sys.argv[5]) if len(sys.argv) > 5 else tol
    la = [json.loads(l) for l in open(a)]
    lb = [json.loads(l) for l in open(b)]
    env = envelope(la, [json.loads(l) for l in open(sys.argv[6])]) if len(sys.argv) > 7 else None
    factor = float(sys.argv[7]) if env else 0.0
    if len(la) != len(lb):
        sys.exit("%d log lines against %d" % (len(la), len(lb)))
    worst = late = 0.0
    for i, (x, y) in enumerate(zip(la, lb)):
        fx, fy = dict(flat(x)), dict(flat(y))
        after = strict is not None and (x.get("step") or 0) > strict
        t = drift if after else tol
        for k, u in fx.items():
            v = fy.get(k)
            if k in UNCOMPARED[:3] or (after and k in ("loss_scale", "skipped")):
                continue
            if k in ("step", "loss_scale", "skipped", "fp8_exp_min", "fp8_exp_max") or u is None or v is None:
                if u != v:
                    sys.exit("step %s: %s %s against %s" % (x.get("step"), k, u, v))
                continue
            if after and env:       # the program's own sensitivity, FACTOR times
                t = max(drift, factor * env[i].get(k, 0.0))
            if k.endswith("accuracy") or k.endswith("acc"):
                at = max(ACC_TOL, t) if after and env else ACC_TOL
                if abs(u - v) > at:
                    sys.exit("step %s: %s %.8g against %.8g (tolerance %g absolute)"
                             % (x.get("step"), k, u, v, at))
                continue
            r = rel(u, v)
            if after:
                late = max(late, r)
            else:
                worst = max(worst, r)
            if r > t:
                sys.exit("step %s: %s %.8g against %.8g (tolerance %g relative)"
                         % (x.get("step"), k, u, v, t))
    if strict is None:
        print("worst relative difference %.2e" % worst)
    elif env:
        own = max(env[-1].values(), default=0.0)
        print("worst relative difference %.2e to step %d, %.2e after it (the program from nudged "
              "parameters parts from itself by up to %.2e)" % (worst, strict, late, own))
    else:
        print("worst relative difference %.2e to step %d, %.2e after it" % (worst, strict, late))


if __name__ == "__main__":
    main()
