"""synth_data.py - synthetic training data for any model, read from its
plan: python3 synth_data.py PLAN.json MODEL.mp DIR BATCHES

Writes DIR/<input>.npy for every input of the model and prints the
trainer's arguments (--data NAME=FILE ...). Values suit what reads them:
ids and labels (read by embedding, cross_entropy, accuracy) are 0 or 1,
other integer inputs 0..9 (u8: 0..255), floats standard normal; a window
input (`input seq: u16[B, T + 1] window`) gets one stream of 8 windows;
the other inputs BATCHES batches of samples.
Deterministic (seed 7), so two runs see the same batches.
"""
import json
import re
import sys

import numpy as np

ID_READERS = {"embedding", "cross_entropy", "accuracy", "embedding_dw"}
VIEWS = {"reshape", "flatten", "slice", "chunk", "transpose", "expand", "concat"}
NP = {"f32": np.float32, "i32": np.int32, "u8": np.uint8, "u16": np.uint16}


def main():
    plan_path, mp_path, out, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    plan = json.load(open(plan_path))
    text = open(mp_path).read()
    nodes = plan["nodes"]
    readers = {}
    for n in nodes:
        for i in n["inputs"]:
            readers.setdefault(i["from"], []).append(n)

    def ids(i):   # read as ids or labels, directly or through views
        return any(u["op"] in ID_READERS or (u["op"] in VIEWS and ids(u["id"]))
                   for u in readers.get(i, []))
    r = np.random.RandomState(7)
    args = []
    for n in nodes:
        if n["op"] != "input":
            continue
        name, t, shape = n["name"], n["type"], n["shape"]
        window = re.search(r"^\s*input\s+%s\s*:[^\n#]*\bwindow\b" % re.escape(name), text, re.M)
        dims = [8 * shape[1]] if window else [batches * shape[0]] + shape[1:]
        if t == "f32":
            v = r.randn(*dims)
        elif ids(n["id"]):
            v = r.randint(0, 2, dims)
        else:
            v = r.randint(0, 256 if t == "u8" else 10, dims)
        path = "%s/%s.npy" % (out, name)
        np.save(path, v.astype(NP[t]))
        args.append("--data %s=%s" % (name, path))
    print(" ".join(args))


if __name__ == "__main__":
    main()
