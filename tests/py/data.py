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
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import mpfile  # noqa: E402

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


def shakespeare_vocab(t, n, offset=0, stride=None):
    """As shakespeare(), but ids index the sorted set of the text's 65
    distinct characters (examples/char_transformer.mp's vocabulary)."""
    raw = _cached("tinyshakespeare", lambda: np.frombuffer(
        open(os.path.join(SHARED, "tinyshakespeare", "input.txt"), "rb").read(), np.uint8))
    table = np.zeros(256, np.int32)
    table[np.unique(raw)] = np.arange(len(np.unique(raw)), dtype=np.int32)
    x, y = shakespeare(t, n, offset, stride)
    return table[x], table[y]


def one_hot(labels, classes):
    return np.eye(classes, dtype=np.float32)[labels]


def prepare(out):
    """Writes the small .npy sets of the reference tests into out/ (kept if
    present): mnist_{x,y} (4096 training images), mnist_e{x,y} (1024 test
    images), digits_{x,y,t} / digits_e{x,y,t} (1280 / 512 rows, t one-hot),
    shake_{x,y} / shake_e{x,y} (windows of 32 characters, byte ids),
    shakev_* (windows of 64, vocabulary ids), mnist_x4 / mnist_ex4 (the
    images as [N, 1, 28, 28])."""
    os.makedirs(out, exist_ok=True)
    x, y = mnist("train", 4096)
    ex, ey = mnist("t10k", 1024)
    dx, dy = digits()
    sx, sy = shakespeare(32, 1024, stride=97)
    tx, ty = shakespeare(32, 256, offset=1_000_000, stride=53)
    vx, vy = shakespeare_vocab(64, 512, stride=211)
    wx, wy = shakespeare_vocab(64, 128, offset=1_000_000, stride=101)
    sets = {"mnist_x": x, "mnist_y": y, "mnist_ex": ex, "mnist_ey": ey,
            "digits_x": dx[:1280], "digits_y": dy[:1280], "digits_t": one_hot(dy[:1280], 10),
            "digits_ex": dx[1280:1792], "digits_ey": dy[1280:1792], "digits_et": one_hot(dy[1280:1792], 10),
            "shake_x": sx, "shake_y": sy, "shake_ex": tx, "shake_ey": ty,
            "shakev_x": vx, "shakev_y": vy, "shakev_ex": wx, "shakev_ey": wy,
            "mnist_x4": x.reshape(-1, 1, 28, 28), "mnist_ex4": ex.reshape(-1, 1, 28, 28)}
    for k, a in sets.items():
        p = os.path.join(out, k + ".npy")
        if not os.path.exists(p):
            np.save(p, a)


def random_inputs(model, out, n, seed=0):
    """Random data for every input of a .mp model, n samples each (u8
    0..255, i32 and u16 0..9 so that any label or token range holds, floats
    normal; a window input: one stream of n windows' worth of values);
    prints the trainer's --data arguments."""
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    args = []
    for name, (ty, dims, window) in mpfile.read(model)["inputs"].items():
        shape = [n * dims[1]] if window else [n] + dims[1:]
        if ty == "u8":
            a = rng.integers(0, 256, shape, dtype=np.uint8)
        elif ty in ("i32", "u16"):
            a = rng.integers(0, 10, shape, dtype=np.int32 if ty == "i32" else np.uint16)
        else:
            a = rng.standard_normal(shape).astype({"f32": np.float32, "f16": np.float16}[ty])
        path = os.path.join(out, name + ".npy")
        np.save(path, a)
        args.append(f"{name}={path}")
    print(" ".join(args))


if __name__ == "__main__":
    # data.py DIR | data.py --random MODEL.mp DIR N | data.py --mnist SPLIT N X.npy Y.npy
    if sys.argv[1] == "--random":
        random_inputs(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "--mnist":
        x, y = mnist(sys.argv[2], int(sys.argv[3]))
        np.save(sys.argv[4], x)
        np.save(sys.argv[5], y)
    else:
        prepare(sys.argv[1])
