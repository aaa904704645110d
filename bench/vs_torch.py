"""vs_torch.py - PyTorch eager's side of bench/vs_frameworks.sh.

    vs_torch.py MODEL.mp --init-out FILE.safetensors --seed N
        writes the twin's initial parameters (the file every framework
        starts from) and prints their count
    vs_torch.py MODEL.mp --mode float32|autocast_bf16 --data NAME=FILE.npy ...
            --init FILE --steps N --warmup W --out RESULT.json
        trains and times (bench/vs_common.py)

The twins: examples/char_transformer.mp is tests/py/models.py's
CharTransformer (the one the reference tests hold to 1e-4 of the trainer);
bench/mnist_mlp2.mp is MnistMlp2 below. The optimizer, schedule and
clipping come from the train block through tests/py/ref.py, as in the
reference tests. Both compute the models' `metric accuracy` in the forward
pass, as the trainer's step does. Threads: torch.set_num_threads(OMP_NUM_THREADS)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import vs_common

import models  # noqa: E402  (tests/py, on the path through vs_common)
import ref  # noqa: E402
import st  # noqa: E402


class MnistMlp2(nn.Module):
    """bench/mnist_mlp2.mp: 784-512-512-10, relu, cross-entropy."""
    def __init__(self, **_):
        super().__init__()
        self.h1 = nn.Linear(784, 512)
        self.h2 = nn.Linear(512, 512)
        self.logits = nn.Linear(512, 10)

    def forward(self, b):
        x = b["image"].to(torch.float32) / 255
        logits = self.logits(F.relu(self.h2(F.relu(self.h1(x)))))
        return models.xent(logits, b["label"]), {"accuracy": models.accuracy(logits, b["label"])}


ref.TWINS["mnist_mlp2"] = MnistMlp2


def init(model, out, seed):
    torch.manual_seed(seed)
    net = ref.twin(ref.mpfile.read(model))
    st.write(out, {k: v.numpy() for k, v in ref.model_state(net).items()})
    print(sum(p.numel() for p in net.parameters()))


def train(a):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    net = ref.twin(a.mp)
    net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in a.params.items()}, strict=True)
    tr = a.mp["train"]
    opt = ref.optimizer(tr, list(net.named_parameters()))
    base = ref.mpfile.call(tr["optimizer"])[1]["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: ref.sched_lr(tr, e + 1) / base)
    clip = tr.get("clip_grad_norm", 0)
    get = vs_common.batches(a.arrays, vs_common.batch_size(a.mp))
    bf16 = a.mode == "autocast_bf16"
    net.train()

    def step(j):
        b = {k: ref.to_torch(v) for k, v in get(j).items()}
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = net(b)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        sched.step()
        return loss.detach()
    loss1, last, ms = vs_common.timed(a, step)
    vs_common.write(a, f"torch {torch.__version__}", sum(p.numel() for p in net.parameters()), (loss1, last), ms)


def main():
    if "--init-out" in sys.argv:
        i = sys.argv.index("--init-out")
        init(sys.argv[1], sys.argv[i + 1], int(sys.argv[sys.argv.index("--seed") + 1]))
        return
    train(vs_common.parse_args(["float32", "autocast_bf16"]))


if __name__ == "__main__":
    main()
