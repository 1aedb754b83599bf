"""A module wrapped in DDP (without find_unused_parameters) whose forward does not use one of
its submodules on every path: DDP then waits for a gradient that never comes."""

from __future__ import annotations

import ast

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft

KIND = "unused_parameters"
NEVER = ("{cls}.forward never uses self.{attr} (line {line}), and DDP is not told "
         "(find_unused_parameters): its parameters get no gradient and the next step fails")
SOMETIMES = ("{cls}.forward uses self.{attr} (line {line}) on some paths only: on an iteration "
             "where a rank skips it, DDP waits for its gradient (find_unused_parameters is off)")
FIX = ("use every submodule in every forward (its output weighted by 0.0 if need be), or wrap "
       "with DDP(model, find_unused_parameters=True)")
PARAMLESS = frozenset({"ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
                       "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Identity", "Flatten",
                       "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
                       "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
                       "AdaptiveMaxPool2d", "Upsample", "LeakyReLU", "ELU", "Softplus",
                       "CrossEntropyLoss", "MSELoss", "ModuleList", "ModuleDict"})
NOT_MODULES = frozenset({"Generator", "Tensor", "Stream", "Event", "Path", "Counter",
                         "OrderedDict", "Random", "RandomState", "Lock", "Queue", "Thread",
                         "SummaryWriter", "GradScaler", "Accelerator", "Fabric"})
Uses = frozenset[str]


def _submodules(cls: ast.ClassDef) -> dict[str, int]:
    """``self.x = nn.Linear(...)`` (or a Parameter) in ``__init__``: attribute -> line."""
    found: dict[str, int] = {}
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"),
                None)
    for node in ast.walk(init) if init else []:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        dotted = ast.unparse(node.value.func)
        name = dotted.rsplit(".", 1)[-1]
        if name in PARAMLESS or not name[:1].isupper() and name != "Parameter":
            continue
        if dotted.startswith("torch.") and not dotted.startswith(("torch.nn.", "torch.Parameter")):
            continue  # torch.Generator(), torch.Tensor(), torch.cuda.Stream(): no module
        if name in NOT_MODULES:
            continue
        for t in node.targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                    t.value.id == "self":
                found[t.attr] = node.lineno
    return found


def _uses(node: ast.AST | None) -> set[str]:
    """``self.x`` read for sure when ``node`` is evaluated (both sides of a conditional
    expression, only the first operand of ``and``/``or``)."""
    if node is None or isinstance(node, (ast.Lambda, ast.FunctionDef)):
        return set()
    if isinstance(node, ast.IfExp):
        return _uses(node.test) | (_uses(node.body) & _uses(node.orelse))
    if isinstance(node, ast.BoolOp):
        return _uses(node.values[0])
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id == "self":
        return {node.attr}
    out: set[str] = set()
    for child in ast.iter_child_nodes(node):
        out |= _uses(child)
    return out


STATIC_ITER_NAMES = frozenset({"self", "range", "len", "enumerate", "zip", "reversed"})


def _runs_every_forward(loop: ast.For | ast.While) -> bool:
    """True for a loop whose body runs on every forward, the same on every rank: ``while
    True``, ``range(2)``, a non-empty literal, or an iterable made of ``self``'s attributes
    only (``range(self.depth)``: configuration, not data); and no ``break`` or ``continue``
    that could skip the rest of its body."""
    if any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(loop)):
        return False
    if isinstance(loop, ast.While):
        return isinstance(loop.test, ast.Constant) and bool(loop.test.value)
    it = loop.iter
    if isinstance(it, (ast.List, ast.Tuple)):
        return bool(it.elts)
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
            and it.args and all(isinstance(a, ast.Constant) for a in it.args):
        consts = [a.value for a in it.args]
        return all(isinstance(c, int) for c in consts) and len(range(*consts[:3])) > 0
    names = {n.id for n in ast.walk(it) if isinstance(n, ast.Name)}
    return "self" in names and names <= STATIC_ITER_NAMES


def _paths(stmts: list[ast.stmt], current: set[str] | None,
           returns: list[set[str]]) -> set[str] | None:
    """What every path through ``stmts`` uses; returns append what they used; None: no path
    falls through."""
    for stmt in stmts:
        if current is None:
            return None
        if isinstance(stmt, ast.Return):
            returns.append(current | _uses(stmt.value))
            return None
        if isinstance(stmt, ast.Raise):
            return None
        if isinstance(stmt, ast.If):
            current = current | _uses(stmt.test)
            a = _paths(stmt.body, set(current), returns)
            b = _paths(stmt.orelse, set(current), returns)
            current = a & b if a is not None and b is not None else (a if b is None else b)
        elif isinstance(stmt, (ast.For, ast.While)):
            current = current | _uses(stmt.iter if isinstance(stmt, ast.For) else stmt.test)
            inner = _paths(stmt.body, set(current), [])
            if _runs_every_forward(stmt) and inner is not None:
                current = inner  # a loop that runs every forward: its uses count
            # otherwise it may not run: its uses do not count
        elif isinstance(stmt, (ast.With, ast.Try)):
            items = [i.context_expr for i in stmt.items] if isinstance(stmt, ast.With) else []
            current = current | set().union(*map(_uses, items))
            current = _paths(stmt.body, current, returns)
        else:
            current = current | _uses(stmt)
    return current


def check(cls: ast.ClassDef, ddp: ast.Call, module: ParsedModule) -> Draft | None:
    """Rule: under DDP without ``find_unused_parameters``, every submodule with parameters
    must take part in every forward (on every path of ``forward``)."""
    if any(k.arg == "find_unused_parameters" and not (
            isinstance(k.value, ast.Constant) and not k.value.value) for k in ddp.keywords):
        return None
    forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                    and f.name == "forward"), None)
    subs = _submodules(cls)
    if forward is None or not subs:
        return None
    helpers = {f.name: _uses(f) for f in cls.body if isinstance(f, ast.FunctionDef)}
    anywhere = _uses(forward) | {a for n in ast.walk(forward) if isinstance(n, ast.Attribute)
                                 and isinstance(n.value, ast.Name) and n.value.id == "self"
                                 for a in [n.attr]}
    anywhere |= set().union(*(helpers[m] for m in anywhere & helpers.keys()), set())
    returns: list[set[str]] = []
    end = _paths(forward.body, set(), returns)
    if end is not None:
        returns.append(end)
    every = set.intersection(*returns) if returns else set()
    every |= set().union(*(helpers[m] for m in every & helpers.keys()), set())
    for attr, line in subs.items():
        if attr in every:
            continue
        message = SOMETIMES if attr in anywhere else NEVER
        severity = Severity.WARNING if attr in anywhere else Severity.ERROR
        return Draft(KIND, severity, ddp.lineno, "DDP construction", None,
                     message.format(cls=cls.name, attr=attr, line=line), FIX)
    return None
