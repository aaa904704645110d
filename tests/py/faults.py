"""faults.py - the bad inputs of t_faults.sh, written into a folder.

    faults.py DIR GOOD_CKPT    (GOOD_CKPT: a real checkpoint of the fault
                                model, with Adam state, to corrupt)
Writes good data (x.npy u8 [256, 784], y.npy i32 [256], and x_v2.npy: x
as a version 2.0 .npy, which must be accepted), one file per
fault, and prints the table of cases, one per line:
    NAME<TAB>trainer arguments (| separated)<TAB>regexes the error must
    all match (separated by \x1f)<TAB>accepted exit codes (, separated)
The folder is relative to the repository root, as the trainer is run from
there. Every case must be refused with exit 1 before training starts.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import data  # noqa: E402
import st  # noqa: E402


def npy_raw(path, header, body=b"", version=1):
    """An .npy file with an arbitrary header dict text (padded as numpy does)."""
    h = header.encode("latin1")
    hl = 4 if version >= 2 else 2
    pad = 64 - (10 + (hl - 2) + len(h) + 1) % 64
    h += b" " * pad + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]))
        f.write(struct.pack("<I" if version >= 2 else "<H", len(h)))
        f.write(h + body)


def main(d, good_ckpt):
    os.makedirs(d, exist_ok=True)
    x, y = data.mnist("train", 256)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    np.save(p("x.npy"), x)
    np.save(p("y.npy"), y)
    cases = []

    def case(name, args, *regex, codes="1"):
        cases.append((name, "|".join(args), "\x1f".join(regex), codes))

    def xy(xf="x.npy", yf="y.npy"):
        return ["--data", f"image={p(xf)}", "--data", f"label={p(yf)}"]

    # -- data files
    np.save(p("x_f32.npy"), x.astype(np.float32))
    case("dtype", xy("x_f32.npy"), "x_f32\\.npy", "(u1|u8)", "(f4|f32|float32)")
    np.save(p("y_i64.npy"), y.astype(np.int64))
    case("dtype_labels", xy(yf="y_i64.npy"), "y_i64\\.npy", "(i4|i32)", "(i8|i64|int64)")
    np.save(p("y_be.npy"), y.astype(">i4"))
    case("big_endian", xy(yf="y_be.npy"), "y_be\\.npy", "(endian|>i4|<i4|i32)")
    np.save(p("x_shape.npy"), x[:, :783])
    case("shape", xy("x_shape.npy"), "x_shape\\.npy", "784", "783")
    np.save(p("x_3d.npy"), x.reshape(256, 28, 28))
    case("shape_rank", xy("x_3d.npy"), "x_3d\\.npy", "784", "28")
    np.save(p("x_fortran.npy"), np.asfortranarray(x))
    case("fortran", xy("x_fortran.npy"), "x_fortran\\.npy", "(fortran|C order|c-order|C-contiguous)")
    raw = open(p("x.npy"), "rb").read()
    open(p("x_trunc.npy"), "wb").write(raw[: len(raw) // 2])
    case("truncated", xy("x_trunc.npy"), "x_trunc\\.npy", "(truncat|short|bytes|end of file|expected)")
    open(p("x_hdr.npy"), "wb").write(raw[:40])
    case("truncated_header", xy("x_hdr.npy"), "x_hdr\\.npy")
    open(p("x_text.npy"), "w").write("image,label\n1,2\n")
    case("not_npy", xy("x_text.npy"), "x_text\\.npy", "(npy|NumPy|magic)")
    open(p("x_empty.npy"), "wb").close()
    case("empty_file", xy("x_empty.npy"), "x_empty\\.npy")
    npy_raw(p("x_garbage_hdr.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (256, oops}", x.tobytes())
    case("bad_header", xy("x_garbage_hdr.npy"), "x_garbage_hdr\\.npy")
    np.save(p("y_short.npy"), y[:200])
    case("sample_counts", xy(yf="y_short.npy"), "y_short\\.npy|x\\.npy", "256", "200")
    np.save(p("x_few.npy"), x[:40])
    np.save(p("y_few.npy"), y[:40])
    case("fewer_than_a_batch", xy("x_few.npy", "y_few.npy"), "few\\.npy", "40", "64")
    yr = y.copy()
    yr[123] = 10
    np.save(p("y_range.npy"), yr)
    case("label_too_big", xy(yf="y_range.npy"), "y_range\\.npy", "123", "10")
    yn = y.copy()
    yn[7] = -1
    np.save(p("y_neg.npy"), yn)
    case("label_negative", xy(yf="y_neg.npy"), "y_neg\\.npy", "\\b7\\b", "-1")
    case("eval_label", xy() + ["--eval", f"image={p('x.npy')}", "--eval", f"label={p('y_range.npy')}"],
         "y_range\\.npy", "123")
    case("eval_shape", xy() + ["--eval", f"image={p('x_shape.npy')}", "--eval", f"label={p('y.npy')}"],
         "x_shape\\.npy", "784")
    case("missing_file", xy("nonexistent.npy"), "nonexistent\\.npy")
    # naming an input the model lacks, or leaving one out, is a usage error (2) or a data error (1)
    case("unknown_input", xy() + ["--data", f"pixels={p('x.npy')}"], "pixels", codes="1,2")
    case("missing_input", ["--data", f"image={p('x.npy')}"], "label", codes="1,2")
    with open(p("x_v2.npy"), "wb") as f:
        np.lib.format.write_array(f, x, version=(2, 0))

    # -- checkpoints (--init and --resume)
    good, meta = st.read(good_ckpt, with_meta=True)
    params = {k: v for k, v in good.items() if not k.startswith("optimizer.")}
    raw = open(good_ckpt, "rb").read()
    open(p("ck_trunc.safetensors"), "wb").write(raw[: len(raw) - 1000])
    open(p("ck_garbage.safetensors"), "wb").write(b"\x10\0\0\0\0\0\0\0{not json}      ")
    open(p("ck_hugehdr.safetensors"), "wb").write(struct.pack("<Q", 1 << 60) + b"{}")
    # the same faults in an --init file (parameters only, as from PyTorch) and
    # in a --resume file (a whole checkpoint: optimizer state and metadata)
    for kind, base, m in (("init", params, None), ("resume", good, meta)):
        st.write(p(f"{kind}_missing.safetensors"), {k: v for k, v in base.items() if k != "h.bias"}, m)
        bad = dict(base)
        bad["h.weight"] = base["h.weight"][:, :783]
        st.write(p(f"{kind}_shape.safetensors"), bad, m)
        bad = dict(base)     # --init converts F16, BF16, F64; an integer type is refused
        bad["h.weight"] = base["h.weight"].astype(np.float16 if kind == "resume" else np.int32)
        st.write(p(f"{kind}_dtype.safetensors"), bad, m)
        st.write(p(f"{kind}_lie.safetensors"), base, m, dtype_override={"logits.weight": "F16"})
    for flag in ("--init", "--resume"):
        f = flag[2:]
        case(f"{f}_truncated", xy() + [flag, p('ck_trunc.safetensors')], "ck_trunc")
        case(f"{f}_garbage", xy() + [flag, p('ck_garbage.safetensors')], "ck_garbage")
        case(f"{f}_huge_header", xy() + [flag, p('ck_hugehdr.safetensors')], "ck_hugehdr")
        case(f"{f}_missing_tensor", xy() + [flag, p(f"{f}_missing.safetensors")], f"{f}_missing", "h\\.bias")
        case(f"{f}_shape", xy() + [flag, p(f"{f}_shape.safetensors")], f"{f}_shape", "h\\.weight", "784", "783")
        case(f"{f}_dtype", xy() + [flag, p(f"{f}_dtype.safetensors")], f"{f}_dtype", "h\\.weight", "(F32|f32)",
             "(F16|f16)" if f == "resume" else "(I32|i32)")
        case(f"{f}_header_lies", xy() + [flag, p(f"{f}_lie.safetensors")], f"{f}_lie", "logits\\.weight")
        case(f"{f}_no_file", xy() + [flag, p('nonexistent.safetensors')], "nonexistent\\.safetensors")
    # --resume needs the optimizer state and the run's metadata
    no_opt = {k: v for k, v in good.items() if k != "optimizer.exp_avg.h.weight"}
    st.write(p("ck_noopt.safetensors"), no_opt, meta)
    case("resume_missing_state", xy() + ["--resume", p('ck_noopt.safetensors')], "ck_noopt", "exp_avg\\.h\\.weight")
    bad_state = dict(good)
    bad_state["optimizer.exp_avg_sq.h.bias"] = good["optimizer.exp_avg_sq.h.bias"][:10]
    st.write(p("ck_state_shape.safetensors"), bad_state, meta)
    case("resume_state_shape", xy() + ["--resume", p('ck_state_shape.safetensors')], "ck_state_shape", "exp_avg_sq\\.h\\.bias")
    st.write(p("ck_params_only.safetensors"), params)
    case("resume_init_file", xy() + ["--resume", p('ck_params_only.safetensors')], "ck_params_only")

    for c in cases:
        print("\t".join(c))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
