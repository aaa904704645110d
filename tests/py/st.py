"""st.py - safetensors files in pure Python + numpy (the `safetensors`
package is not a dependency of the tests).

Format: 8-byte little-endian u64 N, N bytes of JSON mapping each tensor name
to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
data buffer) plus an optional "__metadata__" object of string -> string,
then the data buffer. read() checks what the tests rely on: offsets tile the
buffer, sizes match dtype x shape; anything else raises ValueError naming
the file and the tensor.

`python3 st.py close A B TOL` compares the parameters (not the optimizer
state) of two checkpoints: prints the worst relative difference (of the
larger magnitude, at least 1e-2) and its tensor; exit 1 above TOL.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "U8": "u1", "F64": "<f8",
          "I64": "<i8", "BF16": "<u2"}
NAMES = {np.dtype(v).str: k for k, v in DTYPES.items() if k != "BF16"}


def read(path, with_meta=False):
    """Returns {name: ndarray} (and the metadata dict if with_meta)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header of {n} bytes runs past the end ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out, spans = {}, []
    for name, t in header.items():
        dt = np.dtype(DTYPES[t["dtype"]])
        b, e = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if e - b != count * dt.itemsize or e > len(data) or b < 0:
            raise ValueError(f"{path}: tensor '{name}': offsets {b}..{e} do not hold "
                             f"{t['dtype']}{t['shape']} in a {len(data)}-byte buffer")
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"]).copy()
        spans.append((b, e))
    pos = 0
    for b, e in sorted(spans):
        if b != pos:
            raise ValueError(f"{path}: data buffer has a gap or overlap at byte {pos}")
        pos = e
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} bytes after the last tensor")
    return (out, meta) if with_meta else out


def write(path, tensors, meta=None, dtype_override=None):
    """Writes {name: array} in the given order. dtype_override maps a name to
    a header dtype string to lie about (for fault tests)."""
    header, blobs, pos = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = NAMES[a.dtype.str if a.dtype.str in NAMES else np.dtype(a.dtype).newbyteorder("<").str]
        if dtype_override and name in dtype_override:
            dt = dtype_override[name]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def torch_state(tensors):
    """The model tensors of a checkpoint (no optimizer state) as torch tensors."""
    import torch
    return {k: torch.from_numpy(v.copy()) for k, v in tensors.items()
            if not k.startswith("optimizer.")}


def close(a_path, b_path, tol):
    """Prints the worst relative difference of two checkpoints' parameters;
    True when it is at most tol."""
    a, b = read(a_path), read(b_path)
    worst, at = 0.0, "-"
    for k in sorted(a):
        if not k.startswith("optimizer."):
            x, y = a[k].astype(np.float64), b[k].astype(np.float64)
            d = float(np.max(np.abs(x - y) / np.maximum(np.maximum(np.abs(x), np.abs(y)), 1e-2)))
            worst, at = max((worst, at), (d, k))
    print("parameters within %.2e relative (worst: %s)" % (worst, at))
    return worst <= tol


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "close":
        sys.exit("usage: st.py close A.st B.st TOL")
    sys.exit(0 if close(sys.argv[2], sys.argv[3], float(sys.argv[4])) else 1)
