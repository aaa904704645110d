"""check_plan.py - the rules of PRECISION.md, checked on one plan.

Reads `mpcc --dump-plan=json` on standard input and exits non-zero, naming
each broken rule, if the plan breaks any. Used by tests/t_plan_rules.sh on
every model and policy; the model-specific expectations live there.

    check_plan.py [EXPECTATION ...] < plan.json

Expectations use the dump's own names:
    node:NAME.type=f32     the last forward node named NAME has type f32
    node:NAME.rule=list    ... its rule (class, compute, op likewise)
    fp8:KEY=V              mixed_float8's recipe key (fp8:slots: how many)
    summary:KEY=V          a summary value
    all:OP.compute=f16     every forward OP node has compute f16 (any field)
    copies:PARAM=f16       the parameter's working copies (comma list, or none)
    loss_scale=none        the loss scale kind
    nolowp                 no f16/bf16 type or compute anywhere

Under float32_matmul "tf32" (the json's "float32_matmul"), the products
that run on the GEMM and compute in f32 show compute tf32 (PRECISION.md):
check_tf32 checks which do, then reads tf32 as f32 for the other rules.
"""
import json
import sys

FP32_OPS = {"softmax", "log_softmax", "layer_norm", "batch_norm", "exp", "log", "sqrt",
            "rsqrt", "sum", "mean", "cross_entropy", "mse", "accuracy", "pow", "rms_norm",
            "max", "min", "group_norm", "cumsum"}
LOWP_OPS = {"matmul", "linear", "conv2d", "embedding", "attention", "gru", "lstm", "conv_transpose2d"}
FOLLOW_OPS = {"add", "sub", "mul", "div", "neg", "relu", "gelu", "tanh", "sigmoid", "silu",
              "dropout", "max_pool2d", "avg_pool2d", "global_avg_pool",
              "abs", "sin", "cos", "maximum", "minimum", "clamp", "rope", "randn", "rand",
              "gt", "lt", "ge", "le", "eq", "ne", "where", "upsample", "topk"}
MASK_OPS = {"gt", "lt", "ge", "le", "eq", "ne"}       # u8 0/1 masks, whatever they compare in
INDEX_OPS = {"argmax", "argmin", "topk"}              # i32 indices
VIEW_OPS = {"reshape", "transpose", "flatten"}
FLOATS = {"f32", "f16", "bf16"}
LOWP_OF = {"float32": "f32", "mixed_float16": "f16", "mixed_bfloat16": "bf16", "mixed_float8": "bf16"}
FP8_MAX_HISTORY = 1024
SCALAR_F32 = {"cross_entropy", "mse", "accuracy"}

errors = []


LOADS_ANY_FLOAT = {"layer_norm", "rms_norm", "cross_entropy", "cross_entropy_grad", "layer_norm_dx",
                   "layer_norm_dw", "rms_norm_dx", "rms_norm_dw"}

def fail(msg):
    errors.append(msg)


# products on the GEMM of both targets (compiler/prec.c prec_tf32); the
# convolutions there too, but not depthwise ones (kernels of their own)
TF32_ALWAYS = {"matmul", "linear", "matmul_tn", "gru", "lstm", "gru_grad", "lstm_grad"}
TF32_CONV = {"conv2d", "conv2d_dx", "conv2d_dw", "conv_transpose2d", "conv_transpose2d_dx",
             "conv_transpose2d_dw"}


def check_tf32(plan):
    on = plan.get("float32_matmul") == "tf32"
    count = 0
    for n in plan["nodes"]:
        if n["compute"] == "tf32":
            count += 1
            if not on:
                fail(f"#{n['id']} {n['op']} computes in tf32 without float32_matmul tf32")
            if n["op"] not in TF32_ALWAYS | TF32_CONV:
                fail(f"#{n['id']} {n['op']} computes in tf32 but is no product on the GEMM")
            if n["type"] != "f32":
                fail(f"#{n['id']} {n['op']}: a tf32 product stores {n['type']}, not f32")
            n["compute"] = "f32"
        elif on and n["op"] in TF32_ALWAYS and n["compute"] == "f32":
            fail(f"#{n['id']} {n['op']}: an f32 product under float32_matmul tf32 shows f32")
    if on and plan["summary"].get("tf32_ops") != count:
        fail(f"summary tf32_ops {plan['summary'].get('tf32_ops')}, {count} nodes compute in tf32")
    if not on and "tf32_ops" in plan["summary"]:
        fail("summary has tf32_ops without float32_matmul tf32")


def widest(types):
    fl = {t for t in types if t in FLOATS}
    if not fl:
        return None
    return fl.pop() if len(fl) == 1 else "f32"


def check_structure(plan):
    nodes = plan["nodes"]
    order = {"forward": 0, "backward": 1, "optimizer": 2}
    last = 0
    for i, n in enumerate(nodes):
        if n["id"] != i:
            fail(f"node {i} has id {n['id']}")
        if order[n["phase"]] < last:
            fail(f"node {i}: phase {n['phase']} after a later phase")
        last = order[n["phase"]]
        for inp in n["inputs"]:
            if inp["from"] >= i:
                fail(f"node {i} reads node {inp['from']}, which comes later")
            elif nodes[inp["from"]]["type"] != inp["type"]:
                fail(f"node {i}: input #{inp['from']} listed as {inp['type']}")
            if inp["cast"] != (nodes[inp["from"]]["op"] == "cast"):
                fail(f"node {i}: input #{inp['from']} cast mark is wrong")


def check_forward_node(plan, n, nodes):
    lowp = LOWP_OF[plan["policy"]]
    op, ins = n["op"], [nodes[i["from"]] for i in n["inputs"]]
    nonconst = [x for x in ins if x["op"] != "const"]
    if op == "cast":
        if n["rule"] != "cast" or n["class"] != "none":
            fail(f"cast #{n['id']} is not class none, rule cast")
        if not n.get("user") and ins[0]["type"] == n["type"]:
            fail(f"cast #{n['id']} casts {ins[0]['type']} to itself")
        return
    if op in ("input", "param", "const"):
        return
    rule, cls, comp = n["rule"], n["class"], n["compute"]
    if comp == "e4m3":
        return                        # a quantised product: check_fp8
    if rule == "class":
        want = ("lowp" if op in LOWP_OPS else "fp32" if op in FP32_OPS
                else "follow" if op in FOLLOW_OPS else "none")
        if cls != want:
            fail(f"#{n['id']} {op}: class {cls}, PRECISION.md says {want}")
    w = widest(x["type"] for x in nonconst)
    if rule != "override" and cls in ("follow", "none") and w is None:
        pass                          # integer view or arithmetic
    elif rule == "class" and cls == "lowp" and comp != lowp:
        fail(f"#{n['id']} {op}: lowp op computes in {comp} under {plan['policy']}")
    elif rule == "class" and cls == "fp32" and comp != "f32":
        fail(f"#{n['id']} {op}: fp32 op computes in {comp}")
    elif rule == "class" and cls == "follow" and comp != w:
        fail(f"#{n['id']} {op}: follow op computes in {comp}, widest input is {w}")
    elif rule == "class" and cls == "none" and ins and comp != ins[0]["type"]:
        fail(f"#{n['id']} {op}: view computes in {comp}, its input is {ins[0]['type']}")
    if rule == "override" or cls in ("lowp", "fp32"):
        for x in nonconst:
            # PRECISION.md "Additions: the memory plan": these convert while they
            # load, so the plan's widening cast in front of them is not stored
            if comp == "f32" and op in LOADS_ANY_FLOAT and x["type"] in ("f16", "bf16"):
                continue
            if x["type"] in FLOATS and x["type"] != comp:
                fail(f"#{n['id']} {op} computes in {comp} but reads #{x['id']} in {x['type']}")
    want_type = ("f32" if op in SCALAR_F32 or op == "full" else "u8" if op in MASK_OPS
                 else "i32" if op in INDEX_OPS else comp)
    if n["type"] != want_type and not (w is None and cls in ("follow", "none")):
        fail(f"#{n['id']} {op}: output {n['type']}, expected {want_type}")


def check_casts(plan):
    seen = {}
    for n in plan["nodes"]:
        if n["op"] != "cast" or n["phase"] != "forward" or n.get("user"):
            continue
        key = (n["inputs"][0]["from"], n["type"])
        if key in seen:
            fail(f"casts #{seen[key]} and #{n['id']} both cast #{key[0]} to {key[1]}")
        seen[key] = n["id"]
        src = plan["nodes"][key[0]]
        if (src["op"] == "param") != n["hoisted"]:
            fail(f"cast #{n['id']} of {src['op']} #{src['id']}: hoisted is {n['hoisted']}")


def check_backward(plan):
    nodes = plan["nodes"]
    for n in nodes:
        if n["phase"] != "backward" or n["op"] in ("cast", "loss_scale") or "recomputes" in n:
            continue                  # (a recomputing copy is its forward node again)
        f = nodes[n["grad_of"]]
        if n["op"] == "add" and n["compute"] == n["type"]:
            continue                  # a sum of contributions
        if f["compute"] == "e4m3":    # a quantised product's gradients: check_fp8
            if n["compute"] != ("e5m2" if n["op"] in ("matmul", "matmul_tn") else "bf16"):
                fail(f"backward #{n['id']} {n['op']} of quantised #{f['id']} computes in {n['compute']}")
            continue
        if n["compute"] != f["compute"]:
            fail(f"backward #{n['id']} {n['op']} computes in {n['compute']}, "
                 f"its forward node #{f['id']} in {f['compute']}")


def check_optimizer(plan):
    nodes = plan["nodes"]
    steps = [n for n in nodes if n["phase"] == "optimizer"]
    unscale = [n for n in steps if n["op"] == "unscale"]
    if (plan["loss_scale"]["kind"] != "none") != bool(unscale):
        fail(f"loss scale {plan['loss_scale']['kind']} but {len(unscale)} unscale nodes")
    updates = [n for n in steps if n["op"] in ("sgd", "adam", "adamw", "rmsprop")]
    for u in updates:
        p, g = (nodes[i["from"]] for i in u["inputs"])
        if p["op"] != "param" or g["type"] != "f32" or g["phase"] != "backward":
            fail(f"optimizer #{u['id']} does not read (param, f32 gradient)")
    if unscale and len(unscale[0]["inputs"]) != len(updates):
        fail("unscale does not read every parameter gradient")


def check_summary(plan):
    nodes, s = plan["nodes"], plan["summary"]
    casts = sum(n["op"] == "cast" for n in nodes)
    if s["casts"] != casts:
        fail(f"summary says {s['casts']} casts, the plan has {casts}")
    # (a plan may keep more than float32 would: a value and its cast copy
    # both read by the backward pass)
    lowp = any(n["type"] in ("f16", "bf16") for n in nodes)
    if not lowp and s["activation_bytes"] != s["activation_bytes_f32"]:
        fail("a plan without f16/bf16 values counts activations unlike float32")
    if s["activation_bytes"] <= 0 or s["activation_bytes_f32"] <= 0:
        fail("no activations kept for the backward pass")
    for p in plan["params"]:
        copies = sorted({n["type"] for n in nodes if n["op"] == "cast" and n["phase"] == "forward"
                         and n["inputs"][0]["from"] == p["id"]})
        if sorted(p["copies"]) != copies or p["master"] != "f32":
            fail(f"param {p['name']}: copies {p['copies']}, casts say {copies}")


def fp8_inputs(n):
    return [i for i in n["inputs"] if "fp8" in i]


def check_fp8(plan):
    """mixed_float8 (PRECISION.md "Additions: TF32 and FP8"): which products
    are quantised, their formats and scale slots, the backward products'
    reuse of the forward slots and one e5m2 dy slot per product."""
    nodes = plan["nodes"]
    if plan["policy"] != "mixed_float8":
        if "fp8" in plan or any(fp8_inputs(n) or n["compute"] in ("e4m3", "e5m2") for n in nodes):
            fail(f"FP8 in a {plan['policy']} plan")
        return
    f8 = plan["fp8"]
    hist = f8["amax_history"] if f8["recipe"] == "delayed" else 1
    if not 1 <= hist <= FP8_MAX_HISTORY or f8["margin"] < 0:
        fail(f"fp8 recipe {f8}")
    slots = {s["slot"]: s for s in f8["slots"]}
    if sorted(slots) != list(range(1, len(slots) + 1)):
        fail(f"fp8 slots are not numbered 1..{len(slots)}")
    used = {}
    fwd = [n for n in nodes if n["phase"] == "forward" and n["op"] in ("linear", "matmul")]
    for n in fwd:
        q, ins = fp8_inputs(n), n["inputs"]
        by_class = n["rule"] == "class" and n["class"] == "lowp" and nodes[ins[1]["from"]]["op"] == "param"
        if by_class and not q:
            fail(f"#{n['id']} {n['op']}: a product with a parameter, by class, is not quantised")
        if not q:
            continue
        if len(q) != 2 or q != ins[:2] or n["compute"] != "e4m3" or n["type"] != "bf16":
            fail(f"#{n['id']} {n['op']}: quantised, but inputs {ins[:2]}, compute {n['compute']}, "
                 f"type {n['type']}")
        if n["rule"] not in ("class", "list") or n["class"] != "lowp":
            fail(f"#{n['id']} {n['op']}: quantised under rule {n['rule']}, class {n['class']}")
        for i in q:
            src = nodes[i["from"]]
            # parameters from the f32 master weight, never a bf16 copy; the rest as bf16
            want = "f32" if src["op"] == "param" else "bf16"
            if i["fp8"] != "e4m3" or i["type"] != want:
                fail(f"#{n['id']}: forward input #{src['id']} is {i['type']} as {i['fp8']}")
            s = slots.get(i["slot"])
            if not s or (s["format"], s["of"], s["product"]) != ("e4m3", src["id"], n["id"]) \
                    or s["role"] != ("w" if src["op"] == "param" else "x"):
                fail(f"#{n['id']}: slot {i['slot']} is {s}")
            if i["slot"] in used and used[i["slot"]] != n["id"]:   # (a @ aᵀ: both operands one slot)
                fail(f"slot {i['slot']} used by #{used[i['slot']]} and #{n['id']}")
            used[i["slot"]] = n["id"]
            if src["op"] == "cast" and nodes[src["inputs"][0]["from"]]["op"] == "param":
                fail(f"#{n['id']}: reads parameter #{src['inputs'][0]['from']} through a cast")
    dy_slot = {}
    for n in nodes:
        if n["phase"] != "backward":
            continue
        q = fp8_inputs(n)
        f = nodes[n["grad_of"]] if "grad_of" in n else None
        quantised_f = f is not None and fp8_inputs(f)
        if n["op"] not in ("matmul", "matmul_tn") or not quantised_f:
            if q or n["compute"] == "e5m2":
                fail(f"backward #{n['id']} {n['op']} is quantised, its forward node is not")
            continue
        fslot = {i["from"]: i["slot"] for i in fp8_inputs(f)}
        for i in q:                   # a recomputed operand stands for its forward value
            i["from"] = nodes[i["from"]].get("recomputes", i["from"])
        if len(q) != 2 or n["compute"] != "e5m2":
            fail(f"backward #{n['id']}: gradient of a quantised product, inputs {n['inputs']}")
            continue
        for i in q:
            if i["from"] in fslot:
                if i["fp8"] != "e4m3" or i["slot"] != fslot[i["from"]]:
                    fail(f"backward #{n['id']}: forward operand #{i['from']} not read with its slot")
                continue
            s = slots.get(i["slot"])
            if i["fp8"] != "e5m2" or not s or (s["format"], s["role"], s["of"], s["product"]) != \
                    ("e5m2", "dy", i["from"], f["id"]):
                fail(f"backward #{n['id']}: dy #{i['from']} as {i['fp8']}, slot {s}")
            if dy_slot.setdefault(f["id"], i["slot"]) != i["slot"]:
                fail(f"backward #{n['id']}: a second dy slot for product #{f['id']}")
            used[i["slot"]] = n["id"]
    if sorted(used) != sorted(slots):
        fail(f"slots {sorted(set(slots) - set(used))} are not used")
    sm = plan["summary"]
    products = sum(bool(fp8_inputs(n)) for n in nodes)
    forward = sum(bool(fp8_inputs(n)) for n in nodes if n["phase"] == "forward")
    if (sm["fp8_products"], sm["fp8_forward"], sm["fp8_slots"]) != (products, forward, len(slots)):
        fail(f"summary fp8 counts {sm}, the plan has {products} products ({forward} forward), "
             f"{len(slots)} slots")
    if sm["fp8_state_bytes"] != len(slots) * (hist + 1) * 4:
        fail(f"fp8_state_bytes {sm['fp8_state_bytes']} for {len(slots)} slots of history {hist}")


def check_expect(plan, e):
    nodes = plan["nodes"]
    if e == "nolowp":
        bad = [n["id"] for n in nodes if n["type"] in ("f16", "bf16") or n["compute"] in ("f16", "bf16")]
        if bad:
            fail(f"nolowp: nodes {bad[:10]} are f16/bf16")
        return
    key, want = e.split("=", 1)
    if key == "loss_scale":
        got = plan["loss_scale"]["kind"]
    elif key.startswith("fp8:"):          # fp8:recipe=delayed, fp8:slots=12 (a count)
        f8 = plan["fp8"]
        got = str(len(f8["slots"]) if key[4:] == "slots" else f8[key[4:]])
    elif key.startswith("count:"):        # count:backward.transpose=0: nodes of that phase and op
        phase, op = key[6:].split(".", 1)
        got = str(sum(1 for n in nodes if n["phase"] == phase and n["op"] == op))
    elif key.startswith("summary:"):
        got = str(plan["summary"][key[8:]])
    elif key.startswith("copies:"):
        ps = [p for p in plan["params"] if p["name"] == key[7:]]
        if not ps:
            return fail(f"{e}: no parameter {key[7:]}")
        got = ",".join(ps[0]["copies"]) or "none"
    elif key.startswith("all:"):
        op, field = key[4:].rsplit(".", 1)
        ns = [n for n in nodes if n["op"] == op and n["phase"] == "forward"]
        if not ns:
            return fail(f"{e}: no forward {op} node")
        got = ",".join(sorted({n[field] for n in ns}))
    elif key.startswith("node:"):
        name, field = key[5:].rsplit(".", 1)
        ns = [n for n in nodes if n["name"] == name and n["phase"] == "forward" and n["op"] != "cast"]
        if not ns:
            return fail(f"{e}: no forward node named {name}")
        got = ns[-1][field]
    else:
        return fail(f"unknown expectation {e}")
    if got != want:
        fail(f"{e}: got {got}")


def main():
    plan = json.load(sys.stdin)
    nodes = plan["nodes"]
    check_tf32(plan)
    check_structure(plan)
    for n in nodes:
        if n["phase"] == "forward":
            check_forward_node(plan, n, nodes)
    check_casts(plan)
    check_backward(plan)
    check_optimizer(plan)
    check_summary(plan)
    check_fp8(plan)
    for e in sys.argv[1:]:
        check_expect(plan, e)
    for e in errors:
        print("  " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
