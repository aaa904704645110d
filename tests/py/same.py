"""same.py - bit-for-bit comparison of checkpoints and logs (t_resume.sh).

    same.py ckpt A.safetensors B.safetensors
        every tensor byte-identical, same names, same metadata
    same.py log A.jsonl B.jsonl
        every training step logged in both files has identical fields
        (samples_per_s aside); steps logged in only one are ignored, but
        at least one step must be shared
Exit 1 listing the differences."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import st  # noqa: E402


def ckpt(a, b):
    ta, ma = st.read(a, with_meta=True)
    tb, mb = st.read(b, with_meta=True)
    errs = [f"tensor '{k}' only in {a if k in ta else b}" for k in sorted(set(ta) ^ set(tb))]
    for k in sorted(set(ta) & set(tb)):
        if ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape or ta[k].tobytes() != tb[k].tobytes():
            n = (ta[k] != tb[k]).sum() if ta[k].shape == tb[k].shape else "?"
            errs.append(f"tensor '{k}' differs ({n} of {ta[k].size} values)")
    for k in sorted(set(ma) | set(mb)):
        if ma.get(k) != mb.get(k):
            errs.append(f"metadata '{k}': {ma.get(k)!r} vs {mb.get(k)!r}")
    return errs, f"{len(ta)} tensors, {len(ma)} metadata keys"


def log(a, b):
    def read(p):
        out = {}
        for l in open(p):
            if l.strip():
                o = json.loads(l)
                if "eval" not in o:
                    o.pop("samples_per_s", None)
                    out[o["step"]] = o
        return out
    la, lb = read(a), read(b)
    shared = sorted(set(la) & set(lb))
    errs = [] if shared else ["no step logged in both"]
    errs += [f"step {k}: {json.dumps(la[k])} vs {json.dumps(lb[k])}" for k in shared if la[k] != lb[k]]
    return errs, f"{len(shared)} shared steps ({shared[0] if shared else '-'}..{shared[-1] if shared else '-'})"


if __name__ == "__main__":
    errs, what = {"ckpt": ckpt, "log": log}[sys.argv[1]](sys.argv[2], sys.argv[3])
    for e in errs[:20]:
        print("DIFF:", e)
    print(f"{sys.argv[1]} {sys.argv[2]} vs {sys.argv[3]}: {what}: {'identical' if not errs else f'{len(errs)} differences'}")
    sys.exit(1 if errs else 0)
