"""A tensor whose dtype torch infers from Python counters that turn float only inside a loop
some ranks run fewer times: an int64 tensor on a rank that ran none, float32 on the others,
and the collective's dtypes differ."""

from __future__ import annotations

import ast

from ddpdoctor.lint.collectives import dist_op
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft, because, severity_of
from ddpdoctor.lint.taint import Taint, key_of

KIND = "dtype_divergence"
TENSOR_BUILDERS = frozenset({"torch.tensor", "torch.as_tensor", "torch.Tensor"})
FLOAT_METHODS = frozenset({"float", "double", "half", "mean"})
MESSAGE = ("torch.tensor infers its dtype from {names}, an int until the loop on line {loop} "
           "adds a float to it; that loop runs a number of times that depends on {why}: a rank "
           "that runs it no time sends int64 to {op}, the others float32")
FIX = ("state the dtype: torch.tensor([...], dtype=torch.float64) (or start the counters at "
       "0.0)")


def _int_counters(func: ast.AST) -> set[str]:
    """Names the function sets to an int literal (``correct = 0``, ``a, b = 0, 0``)."""
    out: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple) and \
                isinstance(node.value, ast.Tuple) else [(target, node.value)]
            for t, v in pairs:
                if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and \
                        type(v.value) is int:
                    out.add(t.id)
    return out


def _floaty(expr: ast.expr) -> bool:
    """True when the value is surely a Python float: a float literal, a true division, or the
    ``.item()`` of a tensor made float (``.float()``, ``.mean()``)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and type(node.value) is float:
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in FLOAT_METHODS:
            return True
    return False


def _turned_float(func: ast.AST, counters: set[str],
                  uneven: dict[int, Taint]) -> dict[str, tuple[ast.For, Taint]]:
    """Int counters a float is added to inside a loop whose trip count differs between ranks."""
    out: dict[str, tuple[ast.For, Taint]] = {}
    for loop in ast.walk(func):
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or id(loop) not in uneven:
            continue
        for node in ast.walk(loop):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id in counters and _floaty(node.value):
                out.setdefault(node.target.id, (loop, uneven[id(loop)]))
    return out


def check(func: ast.AST, module: ParsedModule, uneven: dict[int, Taint]) -> list[Draft]:
    """Rule: a tensor sent to a collective must have the same dtype on every rank, so its
    dtype must not be inferred from counters that only some ranks' loops make float."""
    counters = _int_counters(func)
    floats = _turned_float(func, counters, uneven) if counters else {}
    if not floats:
        return []
    built: dict[str, tuple[ast.Call, list[str]]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.value, ast.Call) and node.value.args and \
                module.qualified(node.value.func) in TENSOR_BUILDERS and \
                not any(k.arg == "dtype" for k in node.value.keywords):
            names = sorted({n.id for n in ast.walk(node.value.args[0])
                            if isinstance(n, ast.Name) and n.id in floats})
            key = key_of(node.targets[0])
            if names and key is not None:
                built[key] = (node.value, names)
    drafts = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and node.args and key_of(node.args[0]) in built:
            op = dist_op(node, module)
            if op is None:
                continue
            call, names = built[key_of(node.args[0]) or ""]
            loop, taint = floats[names[0]]
            drafts.append(Draft(KIND, severity_of(taint), call.lineno, op, loop.lineno,
                                MESSAGE.format(names=" and ".join(names), loop=loop.lineno,
                                               why=because(taint), op=op), FIX))
    return drafts
