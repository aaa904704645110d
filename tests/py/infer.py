"""infer.py - the PyTorch side of tests/t_infer.sh: evaluation, --predict,
--export and --init conversions of a trainer checked against its twin.

    infer.py prep W MODEL.mp NAME
        Writes W/NAME.init.st (the twin's torch-default parameters, F32) and
        the same values as F16 (NAME.init16.st), BF16 (NAME.initbf.st) and
        F64 (NAME.init64.st), and NAME.part.st for --init-partial: the
        parameters of every layer but `logits`, plus a tensor the model does
        not have (head.weight); NAME.none.st holds only that one.
    infer.py check W MODEL.mp NAME [--emu]
        Compares the trainer's outputs in W (see t_infer.sh for the names)
        with the twin's: eval loss and metrics over every sample of e75 (75
        samples, not a multiple of the batch) and e20 (fewer than a batch),
        --predict's logits (and, for the MLP, --output h), the F16 / BF16 /
        F64 inits, the export loaded with load_state_dict(strict=True), the
        partial init, an export given back to --init and exported again
        (num_batches_tracked kept). With --emu, also the CUDA program's outputs (NAME.emu.*)
        against the C program's.
Exit 0 when everything agrees, 1 with the disagreements listed.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402
import mpfile  # noqa: E402
import ref  # noqa: E402
import st  # noqa: E402

ERRS = []


def bad(msg):
    ERRS.append(msg)
    print("MISMATCH:", msg)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-6)


def data(w, split):
    return {"image": np.load(f"{w}/{split}_x.npy"), "label": np.load(f"{w}/{split}_y.npy")}


def last_eval(path):
    evals = [json.loads(l)["eval"] for l in open(path) if l.strip() and "eval" in l]
    return evals[-1] if evals else None


def twin_from(mp, tensors, strict=False):
    net = ref.twin(mp)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
    res = net.load_state_dict(state, strict=strict)
    missing = [k for k in res.missing_keys if not k.endswith("num_batches_tracked")]
    if missing or res.unexpected_keys:
        bad(f"load_state_dict: missing {missing}, unexpected {res.unexpected_keys}")
    return net.eval()


def outputs(net, d):
    """The logits (what the loss is computed from) of every sample, captured
    where the twin hands them to cross_entropy, and its loss and metrics."""
    seen = []
    real = models.xent
    models.xent = lambda logits, labels: (seen.append(logits), real(logits, labels))[1]
    try:
        with torch.no_grad():
            loss, mets = net({k: torch.from_numpy(a).to(ref.TORCH_INPUT[a.dtype]) for k, a in d.items()})
    finally:
        models.xent = real
    return seen[-1].numpy(), {"loss": float(loss), **{k: float(v) for k, v in mets.items()}}


def check_eval(tag, log, want, tol=1e-5):
    got = last_eval(log)
    if got is None:
        return bad(f"{tag}: {log} has no eval line")
    for k, v in want.items():
        if k not in got or rel(got[k], v) > tol:
            bad(f"{tag}: eval {k} {got.get(k)!r} vs torch {v!r} (tolerance {tol})")
    print(f"{tag}: eval {json.dumps(got)} torch {json.dumps({k: round(v, 7) for k, v in want.items()})}")


def check_close(tag, a, b, tol):
    if a.shape != b.shape:
        return bad(f"{tag}: shape {a.shape} vs {b.shape}")
    d = float(np.abs(a.astype(np.float64) - b).max())
    print(f"{tag}: max |difference| {d:.2e} (tolerance {tol})")
    if not d <= tol:
        bad(f"{tag}: differs by {d:.3e} > {tol}")


def cmd_prep(w, mp, name):
    torch.manual_seed(1)
    net = ref.twin(mp)
    init = {k: v.numpy() for k, v in ref.model_state(net).items()}
    st.write(f"{w}/{name}.init.st", init)
    st.write(f"{w}/{name}.init16.st", {k: v.astype(np.float16) for k, v in init.items()})
    st.write(f"{w}/{name}.init64.st", {k: v.astype(np.float64) for k, v in init.items()})
    bf = {k: (torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.float16))
          for k, v in init.items()}
    st.write(f"{w}/{name}.initbf.st", bf, dtype_override={k: "BF16" for k in bf})
    part = {k: v for k, v in init.items() if not k.startswith("logits.")}
    part["head.weight"] = np.zeros((3, 3), np.float32)
    st.write(f"{w}/{name}.part.st", part)
    st.write(f"{w}/{name}.none.st", {"head.weight": np.zeros((3, 3), np.float32)})


def check_inits(w, mp, name, init, e75):
    """F16, BF16 and F64 files: the values converted to f32 as torch does."""
    for tag, conv in (("init16", lambda v: v.astype(np.float16).astype(np.float32)),
                      ("initbf", lambda v: torch.from_numpy(v).to(torch.bfloat16).float().numpy()),
                      ("init64", lambda v: v)):
        _, want = outputs(twin_from(mp, {k: conv(v) for k, v in init.items()}), e75)
        check_eval(f"{name} --init {tag}", f"{w}/{name}.{tag}.jsonl", want)


def check_export(w, mp, name, prefix):
    """The export loads with strict=True and evaluates as the trainer did."""
    path = f"{w}/{prefix}.export.st"
    tensors = st.read(path)
    net = twin_from(mp, tensors, strict=True)
    for k, v in tensors.items():
        if k.endswith("num_batches_tracked") and (v.dtype != np.int64 or v.shape != () or int(v) != 5):
            bad(f"{path}: {k} is {v.dtype} {v.shape} = {v}, expected an int64 scalar 5 (steps trained)")
    _, want = outputs(net, data(w, "e75"))
    check_eval(f"{prefix} --export loaded with strict=True", f"{w}/{prefix}.train.jsonl", want)
    try:
        import safetensors.torch
        net.load_state_dict(safetensors.torch.load_file(path), strict=True)
        print(f"{prefix}: safetensors.torch.load_file + load_state_dict(strict=True): ok")
    except ImportError:
        print("(the safetensors package is not installed: read with tests/py/st.py)")


def check_partial(w, mp, name, init):
    got, dflt = st.read(f"{w}/{name}.partout.st"), st.read(f"{w}/{name}.dflt.st")
    for k, v in got.items():
        if k.endswith("num_batches_tracked"):
            continue
        want = dflt[k] if k.startswith("logits.") else init[k]
        if not np.array_equal(v, want):
            bad(f"--init-partial: {k} is not the {'initialiser' if k.startswith('logits.') else 'file'}'s")


def cmd_check(w, mp, name, emu):
    torch.set_num_threads(1)
    init = st.read(f"{w}/{name}.init.st")
    net = twin_from(mp, init)
    for split in ("e75", "e20"):
        d = data(w, split)
        logits, want = outputs(net, d)
        check_eval(f"{name} {split}", f"{w}/{name}.{split}.jsonl", want)
        check_close(f"{name} {split} --predict logits", np.load(f"{w}/{name}.{split}.pred.npy"), logits, 1e-4)
        if name == "mlp":
            with torch.no_grad():
                h = torch.relu(net.h(torch.from_numpy(d["image"]).float() / 255)).numpy()
            check_close(f"{name} {split} --predict --output h", np.load(f"{w}/{name}.{split}.h.npy"), h, 1e-4)
        if emu:
            check_eval(f"{name} CUDA program {split}", f"{w}/{name}.emu.{split}.jsonl", want)
            check_close(f"{name} CUDA program {split} --predict", np.load(f"{w}/{name}.emu.{split}.pred.npy"),
                        logits, 1e-4)
    check_inits(w, mp, name, init, data(w, "e75"))
    check_export(w, mp, name, name)
    check_partial(w, mp, name, init)
    first = st.read(f"{w}/{name}.export.st")
    for again, how in (("reexport", "given to --init and exported again"),
                       ("resumed", "of --resume from the run's checkpoint")):
        got = st.read(f"{w}/{name}.{again}.st")
        if sorted(got) != sorted(first) or any(not np.array_equal(got[k], first[k]) for k in first):
            bad(f"the export {how} differs from the run's")
    if emu:
        check_export(w, mp, name, f"{name}.emu")
        c, g = st.read(f"{w}/{name}.export.st"), st.read(f"{w}/{name}.emu.export.st")
        if sorted(c) != sorted(g):
            bad(f"CUDA export names {sorted(g)} vs C {sorted(c)}")
        for k in c:
            if k in g:
                check_close(f"{name} CUDA export {k} vs C", g[k].astype(np.float64), c[k].astype(np.float64), 1e-4)


def main():
    cmd, w, model, name = sys.argv[1:5]
    mp = mpfile.read(model)
    if cmd == "prep":
        cmd_prep(w, mp, name)
        return 0
    cmd_check(w, mp, name, "--emu" in sys.argv[5:])
    print(f"{name}: {len(ERRS)} disagreement(s)")
    return 1 if ERRS else 0


if __name__ == "__main__":
    sys.exit(main())
