"""gpt2_torch.py - the Python side of bench/gpt2_cpu.sh (Debian's python3
with torch and numpy): GPT-2 small on the CPU against PyTorch eager and
llm.c.

    gpt2_torch.py init MODEL.mp INIT.safetensors --seed N [--llmc CKPT.bin --vp VP]
        the twin's initial parameters (nanoGPT's init, tests/py/arch.py's
        GPT) under the trainer's names: the file every row starts from;
        with --llmc, the same numbers as llm.c's gpt2_124M.bin (below).
        Prints the parameter count.
    gpt2_torch.py train MODEL.mp --data seq=TRAIN.bin --init INIT.safetensors
            --mode float32|autocast_bf16 --steps N --warmup W --out RESULT.json
        PyTorch eager: the twin (nanoGPT's GPT as written for torch 1.13:
        attention by mask, softmax and product) trained as the model's train
        block says (tests/py/ref.py: AdamW, its no_decay groups, the cosine
        schedule, clipping), on the trainer's --no-shuffle batches of the
        window input; the time of a step is time.perf_counter around it
        (batch gather included).
    gpt2_torch.py mpcc-run --log LOG.jsonl --row NAME --warmup W --params N --out RESULT.json
            --stderr FILE -- TRAINER ARGS...
        runs a generated trainer (with --log-every 1 --log LOG.jsonl among
        ARGS) and makes its result: the losses from LOG.jsonl, the time of
        step k the time between the arrivals of its "step k/N" line and
        the one before on the trainer's standard error (the log's
        samples_per_s is a whole number, 1 or 2 at GPT-2 small's seconds
        per step of 4 samples: too coarse); step 1's is from the start
        (loading included), so W >= 1
    gpt2_torch.py llmc-tokens IN.bin OUT.bin
        a raw u16 token stream (build/text2bin's) as llm.c's token file
    gpt2_torch.py llmc-log LOG --warmup W --params N --out RESULT.json
        llm.c's "step k: train loss X (took Y ms)" lines as a result
    gpt2_torch.py report RESULT.json ... --meta META.md --tol T --mixed-tol M
            --llmc-tol L --md OUT.md
        checks the step-1 losses (mpcc float32 against PyTorch float32
        within T relative; llm.c within L of mpcc float32; every mixed row
        within M of its float32 row) and, when they agree, prints the table
        and writes it with META.md to OUT.md. Exit 1 when a check fails
        (nothing written).

A result is one JSON object: {"row", "params", "losses": [step 1, ...],
"step_ms": [the timed steps]}.

llm.c's checkpoint (train_gpt2.c, gpt2_build_from_checkpoint): 256 int32 of
header (20240326, version 3, maxT, V, L, H, C, padded V), then every
parameter as float32 in its order: wte (Vp, C), wpe (maxT, C), then each
per-layer tensor stacked over the L layers: ln1w, ln1b, qkvw (3C, C), qkvb,
attprojw (C, C), attprojb, ln2w, ln2b, fcw (4C, C), fcb, fcprojw (C, 4C),
fcprojb; then lnfw, lnfb. Its matrices are (out, in) as torch's Linear, so
no transposes; wte's padding rows (V .. Vp-1) are zero (llm.c's softmax and
loss read only the first V logits). maxT is the model's T.
llm.c's token file (llmc/dataloader.h): 256 int32 (20240520, version 1,
the token count), then the tokens as u16.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import mpfile  # noqa: E402
import st  # noqa: E402

LLMC_LAYER = [("ln_1.weight", "ln1w"), ("ln_1.bias", "ln1b"), ("attn.c_attn.weight", "qkvw"),
              ("attn.c_attn.bias", "qkvb"), ("attn.c_proj.weight", "attprojw"),
              ("attn.c_proj.bias", "attprojb"), ("ln_2.weight", "ln2w"), ("ln_2.bias", "ln2b"),
              ("mlp.c_fc.weight", "fcw"), ("mlp.c_fc.bias", "fcb"),
              ("mlp.c_proj.weight", "fcprojw"), ("mlp.c_proj.bias", "fcprojb")]


def write_llmc(path, sd, c, vp):
    """sd: the init's tensors by nanoGPT name; c: the model's consts."""
    V, T, D, L = c["V"], c["T"], c["D"], c["L"]
    if vp < V:
        sys.exit(f"gpt2_torch.py: padded vocabulary {vp} < V {V}")
    header = np.zeros(256, "<i4")
    header[:8] = [20240326, 3, T, V, L, c["H"], D, vp]
    wte = np.zeros((vp, D), "<f4")
    wte[:V] = sd["transformer.wte.weight"]
    with open(path, "wb") as f:
        header.tofile(f)
        wte.tofile(f)
        np.asarray(sd["transformer.wpe.weight"], "<f4").tofile(f)
        for name, _ in LLMC_LAYER:
            for i in range(L):
                np.asarray(sd[f"transformer.h.{i}.{name}"], "<f4").tofile(f)
        np.asarray(sd["transformer.ln_f.weight"], "<f4").tofile(f)
        np.asarray(sd["transformer.ln_f.bias"], "<f4").tofile(f)


def cmd_init(a):
    import torch
    import ref
    mp = mpfile.read(a.model)
    torch.manual_seed(a.seed)
    net = ref.twin(mp)
    sd = {k: v.numpy() for k, v in ref.model_state(net).items()}
    st.write(a.out, sd)
    if a.llmc:
        write_llmc(a.llmc, sd, mp["consts"], a.vp)
    print(sum(p.numel() for p in net.parameters()))


def cmd_train(a):
    import torch
    import ref
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    mp = mpfile.read(a.model)
    net = ref.twin(mp)
    state = {k: torch.from_numpy(v.copy()) for k, v in st.read(a.init).items()}
    for alias, name in getattr(net, "tied", {}).items():
        state[alias] = state[name]
    net.load_state_dict(state, strict=True)
    tr = mp["train"]
    opt = ref.optimizer(tr, list(net.named_parameters()))
    base = mpfile.call(tr["optimizer"])[1]["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: ref.sched_lr(tr, e + 1) / base)
    clip = tr.get("clip_grad_norm", 0)
    get, _ = ref.batches(ref.load_data(a.data, mp), ref.batch_size(mp), mp)
    bf16 = a.mode == "autocast_bf16"
    net.train()
    losses, ms = [], []
    for j in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        b = get(j)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = net(b)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        sched.step()
        t1 = time.perf_counter()
        losses.append(float(loss.detach()))
        if j >= a.warmup:
            ms.append(1e3 * (t1 - t0))
    row = "PyTorch eager float32" if not bf16 else "PyTorch eager autocast(cpu, bfloat16)"
    save(a.out, row, sum(p.numel() for p in net.parameters()), losses, ms)


def save(path, row, params, losses, ms):
    with open(path, "w") as f:
        json.dump({"row": row, "params": int(params), "losses": losses, "step_ms": ms}, f)
    print(f"{row}: loss {losses[0]:.6f} at step 1, {losses[-1]:.6f} at step {len(losses)}; "
          f"median {np.median(ms):.1f} ms/step over {len(ms)} steps", file=sys.stderr)


def cmd_mpcc_run(a):
    import subprocess
    cmd = a.trainer[1:] if a.trainer[:1] == ["--"] else a.trainer
    at = [time.perf_counter()]
    with open(a.stderr, "w") as err:
        p = subprocess.Popen(cmd, stdout=err, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            if re.match(r"step \d+/\d+ loss ", line):
                at.append(time.perf_counter())
            err.write(line)
    if p.wait() != 0:
        sys.exit(f"gpt2_torch.py: {cmd[0]} exited with {p.returncode} (its output: {a.stderr})")
    steps = {}
    for line in open(a.log):
        o = json.loads(line) if line.strip() else {}
        if "loss" in o and "eval" not in o:
            steps[o["step"]] = o
    n = len(steps)
    if sorted(steps) != list(range(1, n + 1)) or n <= a.warmup or len(at) != n + 1:
        sys.exit(f"gpt2_torch.py: {a.log}: {n} steps logged and {len(at) - 1} step lines on standard error; "
                 f"expected steps 1, 2, ... (--log-every 1) past {a.warmup}")
    save(a.out, a.row, a.params, [steps[k]["loss"] for k in range(1, n + 1)],
         [1e3 * (at[k] - at[k - 1]) for k in range(a.warmup + 1, n + 1)])


def cmd_llmc_tokens(a):
    tok = np.fromfile(a.src, "<u2")
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(tok)]
    with open(a.out, "wb") as f:
        header.tofile(f)
        tok.tofile(f)


def cmd_llmc_log(a):
    steps = [(int(m[1]), float(m[2]), float(m[3])) for m in
             re.finditer(r"^step (\d+): train loss ([-+0-9.eEnaif]+) \(took ([0-9.]+) ms\)", open(a.log).read(), re.M)]
    if len(steps) <= a.warmup:
        sys.exit(f"gpt2_torch.py: {a.log}: {len(steps)} step lines of llm.c, expected more than {a.warmup}")
    save(a.out, "llm.c train_gpt2.c float32", a.params, [s[1] for s in steps],
         [s[2] for s in steps[a.warmup:]])


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def check(rs, a):
    """The step-1 losses: the same forward pass from the same parameters on the same batch."""
    errs = []
    f32, pt = rs.get("mpcc float32"), rs.get("PyTorch eager float32")
    if f32 is None or pt is None:
        return ["the mpcc float32 and PyTorch float32 results are both needed"]
    l1 = f32["losses"][0]
    if not rel(pt["losses"][0], l1) <= a.tol:
        errs.append(f"step 1: PyTorch float32 loss {pt['losses'][0]:.7f} against mpcc float32 {l1:.7f} "
                    f"(relative {rel(pt['losses'][0], l1):.1e} > {a.tol})")
    for name, r in rs.items():
        if name in ("mpcc float32", "PyTorch eager float32"):
            continue
        tol = a.llmc_tol if name.startswith("llm.c") else a.mixed_tol
        ref = pt if name.startswith("PyTorch") else f32
        if not rel(r["losses"][0], ref["losses"][0]) <= tol:
            errs.append(f"step 1: {name} loss {r['losses'][0]:.7f} against {ref['losses'][0]:.7f} "
                        f"(relative {rel(r['losses'][0], ref['losses'][0]):.1e} > {tol})")
    return errs


def cmd_report(a):
    order = ["mpcc float32", "mpcc mixed_bfloat16", "mpcc mixed_float16", "PyTorch eager float32",
             "PyTorch eager autocast(cpu, bfloat16)", "llm.c train_gpt2.c float32"]
    rs = {}
    for r in sorted((json.load(open(p)) for p in a.results), key=lambda r: order.index(r["row"])):
        rs[r["row"]] = r
    errs = check(rs, a)
    if errs:
        print("gpt2_cpu: the rows are not the same computation; no table written:", file=sys.stderr)
        for e in errs:
            print("  " + e, file=sys.stderr)
        sys.exit(1)
    med = {k: float(np.median(r["step_ms"])) for k, r in rs.items()}
    base = med["mpcc float32"]
    n = len(rs["mpcc float32"]["losses"])
    out = [open(a.meta).read().rstrip(), "",
           f"| row | parameters | ms/step (median) | min - max | steps timed | loss at step 1 | at step {n} "
           "| time / mpcc float32 |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, r in rs.items():
        out.append(f"| {k} | {r['params']} | {med[k]:.1f} | {min(r['step_ms']):.1f} - {max(r['step_ms']):.1f} "
                   f"| {len(r['step_ms'])} | {r['losses'][0]:.6f} | {r['losses'][-1]:.6f} | {med[k] / base:.2f} |")

    def ratio(label, num, den):
        if num in med and den in med:
            out.append(f"- {label}: {med[num] / med[den]:.2f}")
    out += ["", "Ratios of the median times (above 1: the second is faster):"]
    ratio("PyTorch eager float32 / mpcc float32", "PyTorch eager float32", "mpcc float32")
    ratio("llm.c / mpcc float32", "llm.c train_gpt2.c float32", "mpcc float32")
    ratio("mpcc float32 / mpcc mixed_bfloat16", "mpcc float32", "mpcc mixed_bfloat16")
    ratio("mpcc float32 / mpcc mixed_float16", "mpcc float32", "mpcc mixed_float16")
    ratio("PyTorch float32 / PyTorch autocast bfloat16", "PyTorch eager float32",
          "PyTorch eager autocast(cpu, bfloat16)")
    ratio("PyTorch autocast bfloat16 / mpcc mixed_bfloat16", "PyTorch eager autocast(cpu, bfloat16)",
          "mpcc mixed_bfloat16")
    pt = rs["PyTorch eager float32"]["losses"]
    f32 = rs["mpcc float32"]["losses"]
    out += ["", f"Step-1 losses: PyTorch float32 within {rel(pt[0], f32[0]):.1e} of mpcc float32 "
            f"(tolerance {a.tol}); at step {n} {rel(pt[-1], f32[-1]):.1e} (not checked)."]
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(a.md, "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("init")
    s.add_argument("model")
    s.add_argument("out")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--llmc")
    s.add_argument("--vp", type=int, default=50304)
    s = sub.add_parser("train")
    s.add_argument("model")
    s.add_argument("--data", action="append", required=True, help="NAME=FILE.bin")
    s.add_argument("--init", required=True)
    s.add_argument("--mode", choices=["float32", "autocast_bf16"], default="float32")
    s.add_argument("--steps", type=int, default=5)
    s.add_argument("--warmup", type=int, default=1)
    s.add_argument("--out", required=True)
    s = sub.add_parser("mpcc-run")
    s.add_argument("--log", required=True)
    s.add_argument("--row", required=True)
    s.add_argument("--warmup", type=int, required=True)
    s.add_argument("--params", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--stderr", required=True)
    s.add_argument("trainer", nargs=argparse.REMAINDER)
    s = sub.add_parser("llmc-tokens")
    s.add_argument("src")
    s.add_argument("out")
    s = sub.add_parser("llmc-log")
    s.add_argument("log")
    s.add_argument("--warmup", type=int, required=True)
    s.add_argument("--params", type=int, required=True)
    s.add_argument("--out", required=True)
    s = sub.add_parser("report")
    s.add_argument("results", nargs="+")
    s.add_argument("--meta", required=True)
    s.add_argument("--tol", type=float, default=1e-4)
    s.add_argument("--mixed-tol", type=float, default=2e-2)
    s.add_argument("--llmc-tol", type=float, default=1e-3)
    s.add_argument("--md", required=True)
    a = p.parse_args()
    {"init": cmd_init, "train": cmd_train, "mpcc-run": cmd_mpcc_run,
     "llmc-tokens": cmd_llmc_tokens, "llmc-log": cmd_llmc_log,
     "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
