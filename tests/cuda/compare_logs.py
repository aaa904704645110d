#!/usr/bin/env python3
"""compare_logs.py A.jsonl B.jsonl TOL - two trainers' JSONL logs agree:
the same lines in the same order; step, loss_scale and skipped equal; the
loss, evaluation losses and metrics within TOL relative (of the larger
magnitude, at least 1e-3), but accuracies (a fraction of samples) within
ACC_TOL absolute: the argmax of two nearly tied logits may flip with the
last bits of a sum, so the two programs may count a sample or two apart
(char_transformer: 1 of 3072 tokens); timings, learning rates and gradient
norms not compared. Prints the worst relative difference; exits 1 with the first
disagreement. Used by tests/t_cuda_emu.sh and bench/gpu_check.sh."""
import json
import sys

ACC_TOL = 2e-3


def flat(d, p=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, p + k + ".")
        else:
            yield p + k, v


def main():
    a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    la = [json.loads(l) for l in open(a)]
    lb = [json.loads(l) for l in open(b)]
    if len(la) != len(lb):
        sys.exit("%d log lines against %d" % (len(la), len(lb)))
    worst = 0.0
    for x, y in zip(la, lb):
        fx, fy = dict(flat(x)), dict(flat(y))
        for k, u in fx.items():
            v = fy.get(k)
            if k in ("samples_per_s", "grad_norm", "lr"):
                continue
            if k in ("step", "loss_scale", "skipped") or u is None or v is None:
                if u != v:
                    sys.exit("step %s: %s %s against %s" % (x.get("step"), k, u, v))
                continue
            if k.endswith("accuracy"):
                if abs(u - v) > ACC_TOL:
                    sys.exit("step %s: %s %.8g against %.8g (tolerance %g absolute)"
                             % (x.get("step"), k, u, v, ACC_TOL))
                continue
            r = abs(u - v) / max(abs(u), abs(v), 1e-3)
            worst = max(worst, r)
            if r > tol:
                sys.exit("step %s: %s %.8g against %.8g (tolerance %g relative)"
                         % (x.get("step"), k, u, v, tol))
    print("worst relative difference %.2e" % worst)


if __name__ == "__main__":
    main()
