"""data.py - the datasets of the reference tests as NumPy arrays, and .npy
files in the layouts the trainer must accept or refuse.

Reads ../shared/data/ (relative to the repository root) and caches decoded
arrays under build/ref-cache/ so that every test does not gunzip MNIST
again. Arrays are returned in the dtypes the models declare: u8 images,
i32 labels, f32 features.
"""
import gzip
import os
import struct

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(ROOT, "..", "shared", "data")
CACHE = os.path.join(ROOT, "build", "ref-cache")


def _cached(name, make):
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, name + ".npy")
    if not os.path.exists(path):
        tmp = path + ".tmp.%d.npy" % os.getpid()
        np.save(tmp, make())
        os.replace(tmp, path)
    return np.load(path)


def _idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, count = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, np.uint8, count * rows * cols, 16).reshape(count, rows * cols)
    if magic == 0x801:
        return np.frombuffer(raw, np.uint8, count, 8).astype(np.int32)
    raise ValueError(f"{path}: magic {magic:#x} is not an IDX image or label file")


def mnist(split, n=None, dataset="mnist"):
    """(images u8 [n, 784], labels i32 [n]) of split 'train' or 't10k'."""
    d = os.path.join(SHARED, dataset)
    x = _cached(f"{dataset}-{split}-x", lambda: _idx(os.path.join(d, f"{split}-images-idx3-ubyte.gz")))
    y = _cached(f"{dataset}-{split}-y", lambda: _idx(os.path.join(d, f"{split}-labels-idx1-ubyte.gz")))
    return (x, y) if n is None else (x[:n], y[:n])


def digits():
    """(features f32 [1797, 64] in 0..16, labels i32 [1797])."""
    def load():
        with gzip.open(os.path.join(SHARED, "digits", "digits.csv.gz"), "rt") as f:
            return np.loadtxt(f, delimiter=",", dtype=np.int32)
    a = _cached("digits", load)
    return a[:, :64].astype(np.float32), a[:, 64].astype(np.int32)


def shakespeare(t, n, offset=0, stride=None):
    """n windows of t characters (byte ids, i32) and the next-character
    targets: (x [n, t], y [n, t]). Windows start every `stride` bytes."""
    raw = _cached("tinyshakespeare", lambda: np.frombuffer(
        open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), "rb").read(), np.uint8))
    stride = stride or t
    starts = offset + stride * np.arange(n)
    idx = starts[:, None] + np.arange(t + 1)[None, :]
    w = raw[idx].astype(np.int32)
    return w[:, :-1].copy(), w[:, 1:].copy()


def one_hot(labels, classes):
    return np.eye(classes, dtype=np.float32)[labels]
