"""mpfile.py - reads what the reference side needs from a .mp file: the
model name, the integer/real constants and the train block's settings.

This is not a parser of the language: it reads `model NAME`, top-level
`const NAME = EXPR` lines and the `key = value` lines of `train { }`,
evaluating values as Python expressions (the language's call and constant
syntax is a subset of Python's). Unknown keys are kept as they are.
"""
import ast
import math
import re

# the functions of constant expressions (LANGUAGE.md), as Python's math has them
CONST_FNS = {"log": math.log, "exp": math.exp, "sqrt": math.sqrt, "floor": math.floor,
             "ceil": math.ceil, "min": min, "max": max}


def _value(text, consts):
    """A train-block value: a number, a bare name ('cosine'), a list, or a
    call ('adam', {'lr': 0.001}) whose arguments are evaluated likewise."""
    def ev(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in consts:
                return consts[node.id]
            return {"true": True, "false": False}.get(node.id, node.id)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Call) and node.func.id in CONST_FNS and not node.keywords:
            return CONST_FNS[node.func.id](*[ev(a) for a in node.args])
        if isinstance(node, ast.Call):
            return (node.func.id, {k.arg: ev(k.value) for k in node.keywords},
                    [ev(a) for a in node.args])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                    ast.Div: lambda: a / b if not (isinstance(a, int) and isinstance(b, int)) else a // b,
                    ast.Pow: lambda: a ** b, ast.FloorDiv: lambda: a // b,
                    ast.Mod: lambda: a % b}[type(node.op)]()
        raise ValueError(f"cannot read value {text!r}")
    return ev(ast.parse(text.strip(), mode="eval").body)


def read(path):
    src = open(path).read()
    lines = [re.sub(r"#.*", "", l).rstrip() for l in src.splitlines()]
    name, consts, train, inputs, in_train = None, {}, {}, {}, False
    for l in lines:
        s = l.strip()
        if not s:
            continue
        if s.startswith("model "):
            name = s.split()[1]
        elif s.startswith("const ") and not in_train:
            k, v = s[6:].split("=", 1)
            consts[k.strip()] = _value(v, consts)
        elif s.startswith("input ") and not in_train:
            m = re.match(r"input\s+(\w+)\s*:\s*(\w+)\s*\[(.*)\]\s*(window)?", s)
            inputs[m.group(1)] = (m.group(2), [_value(d, consts) for d in m.group(3).split(",")],
                                  bool(m.group(4)))
        elif re.match(r"train\s*\{", s):
            in_train = True
        elif in_train and s == "}":
            in_train = False
        elif in_train and "=" in s:
            k, v = s.split("=", 1)
            train[k.strip()] = _value(v, consts)
        elif in_train and s.startswith("minimize"):
            train["minimize"] = s.split()[1]
    return {"name": name, "consts": consts, "train": train, "inputs": inputs}


def call(v, default_name=None):
    """A train value as (name, kwargs, positional args)."""
    if isinstance(v, tuple):
        return v
    return (v if v is not None else default_name, {}, [])
