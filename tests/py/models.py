"""models.py - the PyTorch twins of the .mp models the reference tests
train. A twin has the .mp model's parameters under the same names and
shapes (torch.nn modules), and forward(batch) -> (loss, {metric: value})
computing what the .mp file computes, in float32 or float64.

TWINS maps the .mp `model` name to its twin's class. A twin takes the
model's integer constants (const NAME = ...) as keyword arguments where the
shapes depend on them.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def accuracy(logits, labels):
    return (logits.argmax(-1) == labels.long()).double().mean()


def xent(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


class MnistMlp(nn.Module):
    """examples/mnist_mlp.mp (LANGUAGE.md's model), any hidden width."""
    def __init__(self, H=512, **_):
        super().__init__()
        self.h = nn.Linear(784, H)
        self.logits = nn.Linear(H, 10)

    def forward(self, b):
        x = b["image"].to(self.h.weight.dtype) / 255
        logits = self.logits(F.relu(self.h(x)))
        return xent(logits, b["label"]), {"accuracy": accuracy(logits, b["label"])}


class Zoo(nn.Module):
    """tests/models/zoo.mp: most elementwise ops, both norms, mse, softmax."""
    def __init__(self, **_):
        super().__init__()
        self.a = nn.Linear(64, 48)
        self.b = nn.Linear(48, 48)
        self.fc = nn.Linear(48, 32, bias=False)
        self.c = nn.BatchNorm1d(32)
        self.d = nn.LayerNorm(32)
        self.logits = nn.Linear(32, 10)

    def forward(self, bt):
        u = bt["x"].to(self.a.weight.dtype) / 16 - 0.5
        a = torch.tanh(self.a(u))
        b = F.gelu(self.b(a)) * torch.rsqrt(torch.sigmoid(a) + 1) + torch.log(1 + torch.exp(a))
        c = F.relu(self.c(self.fc(b)))
        d = self.d(F.silu(c))
        logits = self.logits(d)
        p = F.softmax(logits, -1)
        ent = (torch.exp(F.log_softmax(logits, -1)) * p).sum(1).mean(0)
        loss = xent(logits, bt["label"]) + F.mse_loss(p, bt["target"].to(p.dtype)) + 0.1 * ent
        return loss, {"accuracy": accuracy(logits, bt["label"]), "sharpness": ent}


TWINS = {"mnist_mlp": MnistMlp, "mlp_small": MnistMlp, "zoo": Zoo}
