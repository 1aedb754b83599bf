"""A module wrapped in DDP (without find_unused_parameters) whose forward does not use one of
its submodules on every path: DDP then waits for a gradient that never comes."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

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


@dataclass
class Receiver:
    """Reads of one module object's attributes, followed into the functions it is handed to:
    the class's own methods (``self.losses(h)``) and the file's functions given it
    (``detection_losses(self, feats)``, where the helper calls it ``det``)."""

    methods: dict[str, ast.FunctionDef]
    functions: dict[str, ast.FunctionDef]
    _every: dict[tuple[int, str], set[str]] = field(default_factory=dict)

    def uses(self, node: ast.AST | None, me: str = "self") -> set[str]:
        """Attributes of ``me`` read for sure when ``node`` is evaluated (both sides of a
        conditional expression, only the first operand of ``and``/``or``), through the
        helpers it calls with ``me``."""
        if node is None or isinstance(node, (ast.Lambda, ast.FunctionDef)):
            return set()
        if isinstance(node, ast.IfExp):
            return self.uses(node.test, me) | (self.uses(node.body, me) &
                                               self.uses(node.orelse, me))
        if isinstance(node, ast.BoolOp):
            return self.uses(node.values[0], me)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == me:
            return {node.attr}
        out: set[str] = set()
        for child in ast.iter_child_nodes(node):
            out |= self.uses(child, me)
        if isinstance(node, ast.Call):
            for helper, name in self.handed(node, me):
                out |= self.every_path(helper, name)
        return out

    def handed(self, call: ast.Call, me: str) -> list[tuple[ast.FunctionDef, str]]:
        """The helpers ``call`` runs with the object: a method called on it, or a function of
        the file given it as an argument, each with the parameter that holds it there."""
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id == me and func.attr in self.methods:
            return [(self.methods[func.attr], "self")]
        if not isinstance(func, ast.Name) or func.id not in self.functions:
            return []
        helper = self.functions[func.id]
        params = [a.arg for a in [*helper.args.posonlyargs, *helper.args.args]]
        out = [(helper, params[i]) for i, a in enumerate(call.args[:len(params)])
               if isinstance(a, ast.Name) and a.id == me]
        named = {a.arg for a in [*helper.args.args, *helper.args.kwonlyargs]}
        out += [(helper, k.arg) for k in call.keywords if k.arg in named and
                isinstance(k.value, ast.Name) and k.value.id == me]
        return out

    def every_path(self, func: ast.FunctionDef, me: str) -> set[str]:
        """What every path through ``func`` reads of ``me`` (a call back into a function
        being read counts for nothing)."""
        key = (id(func), me)
        if key in self._every:
            return self._every[key]
        self._every[key] = set()
        returns: list[set[str]] = []
        end = _paths(self, func.body, set(), returns, me)
        if end is not None:
            returns.append(end)
        found = set.intersection(*returns) if returns else set()
        self._every[key] = found
        return found

    def anywhere(self, func: ast.FunctionDef, me: str, seen: set[int] | None = None) -> set[str]:
        """What ``func`` reads of ``me`` on any path, through its helpers."""
        seen = set() if seen is None else seen
        if id(func) in seen:
            return set()
        seen.add(id(func))
        found = {n.attr for n in ast.walk(func) if isinstance(n, ast.Attribute) and
                 isinstance(n.value, ast.Name) and n.value.id == me}
        for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            for helper, name in self.handed(call, me):
                found |= self.anywhere(helper, name, seen)
        return found


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


def _paths(reader: Receiver, stmts: list[ast.stmt], current: set[str] | None,
           returns: list[set[str]], me: str = "self") -> set[str] | None:
    """What every path through ``stmts`` uses of ``me``; returns append what they used; None:
    no path falls through."""
    def uses(node: ast.AST | None) -> set[str]:
        return reader.uses(node, me)

    for stmt in stmts:
        if current is None:
            return None
        if isinstance(stmt, ast.Return):
            returns.append(current | uses(stmt.value))
            return None
        if isinstance(stmt, ast.Raise):
            return None
        if isinstance(stmt, ast.If):
            current = current | uses(stmt.test)
            a = _paths(reader, stmt.body, set(current), returns, me)
            b = _paths(reader, stmt.orelse, set(current), returns, me)
            current = a & b if a is not None and b is not None else (a if b is None else b)
        elif isinstance(stmt, (ast.For, ast.While)):
            current = current | uses(stmt.iter if isinstance(stmt, ast.For) else stmt.test)
            inner = _paths(reader, stmt.body, set(current), [], me)
            if _runs_every_forward(stmt) and inner is not None:
                current = inner  # a loop that runs every forward: its uses count
            # otherwise it may not run: its uses do not count
        elif isinstance(stmt, (ast.With, ast.Try)):
            items = [i.context_expr for i in stmt.items] if isinstance(stmt, ast.With) else []
            current = current | set().union(*map(uses, items))
            current = _paths(reader, stmt.body, current, returns, me)
        else:
            current = current | uses(stmt)
    return current


def _told(ddp: ast.Call, keyword: str) -> bool:
    """The wrap passes ``keyword`` something other than a false constant."""
    return any(k.arg == keyword and not (isinstance(k.value, ast.Constant) and not k.value.value)
               for k in ddp.keywords)


def check(cls: ast.ClassDef, ddp: ast.Call, module: ParsedModule) -> Draft | None:
    """Rule: under DDP without ``find_unused_parameters``, every submodule with parameters
    must take part in every forward (on every path of ``forward``, through the methods and
    the file's functions it hands ``self`` to). With ``static_graph=True`` DDP learns the
    parameters a forward leaves out in its first iteration: one never used is fine there, one
    used on some paths only is not."""
    if _told(ddp, "find_unused_parameters"):
        return None
    forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                    and f.name == "forward"), None)
    subs = _submodules(cls)
    if forward is None or not subs:
        return None
    reader = Receiver({f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)},
                      {f.name: f for f in module.tree.body if isinstance(f, ast.FunctionDef)})
    anywhere = reader.anywhere(forward, "self")
    every = reader.every_path(forward, "self")
    static = _told(ddp, "static_graph")
    for attr, line in subs.items():
        if attr in every or (static and attr not in anywhere):
            continue
        message = SOMETIMES if attr in anywhere else NEVER
        severity = Severity.WARNING if attr in anywhere else Severity.ERROR
        return Draft(KIND, severity, ddp.lineno, "DDP construction", None,
                     message.format(cls=cls.name, attr=attr, line=line), FIX)
    return None
