#!/usr/bin/env python3
"""nudge.py [--bits N] IN.safetensors OUT.safetensors - a checkpoint's
model tensors with the largest element of each float32 one moved up by one
ulp of a float with N mantissa bits (23, f32's, by default; 10 for f16 and
7 for bf16, whose working copies would round an f32 ulp away), for
--init: the same training from parameters that differ in their last bits
only. bench/gpu_check.sh runs the C program from them to learn
how fast the model's training parts from itself (tests/cuda/compare_logs.py
A B TOL STRICT DRIFT A2 FACTOR). The optimizer's state and mixed_float8's
scales are left out, as --init reads neither."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import st  # noqa: E402


def main():
    args = sys.argv[1:]
    bits = 23
    if len(args) == 4 and args[0] == "--bits":
        bits = int(args[1])
        args = args[2:]
    if len(args) != 2 or not 0 < bits <= 23:
        sys.exit(__doc__)
    out, n = {}, 0
    for k, v in st.read(args[0]).items():
        if k.startswith("optimizer.") or k.startswith("fp8."):
            continue
        v = v.copy()
        if v.dtype == np.float32 and v.size:
            f = v.reshape(-1)
            i = int(np.argmax(np.abs(f)))
            f[i] += np.spacing(np.abs(f[i])) * np.float32(2.0 ** (23 - bits))
            n += 1
        out[k] = v
    st.write(args[1], out)
    print(f"nudged {n} of {len(out)} tensors")


if __name__ == "__main__":
    main()
