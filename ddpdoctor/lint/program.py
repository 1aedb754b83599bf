"""The linted program: every function of the linted files and of the project modules they
import, found by name or by node, and what the files' calls say of the job (a DDP wrap, a
spawn target, a monitored metric, the parameters callers hand a DDP model)."""

from __future__ import annotations

import ast
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.lint.attributes import ObjectFacts
from ddpdoctor.lint.collectives import Site, call_kinds
from ddpdoctor.lint.framework_objects import TUPLE_BUILDERS, annotated_kind, param_kinds, \
    self_kinds, unpacked_kinds
from ddpdoctor.lint.known_calls import bound_arguments
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.taint import Taint, key_of

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
DDP_MARKERS = ("DistributedDataParallel", "FullyShardedDataParallel", "auto_model", ".prepare",
               "Trainer", "Fabric")  # calls that make a file's backward a gradient all-reduce
MONITORING = ("ModelCheckpoint", "EarlyStopping")  # callbacks that read a logged metric


@dataclass
class FunctionInfo:
    """A function (or method) defined in a linted file, or in a project module it imports."""

    node: FunctionNode
    module: ParsedModule
    cls: str | None
    site: Site | None = None  # the first collective it issues, directly or through calls
    returns: Taint | None = None  # the taint of what it returns
    nested: bool = False  # defined inside another function (walked with it)
    returns_elts: list[Taint | None] | None = None  # item by item, for tuple returns
    switches: frozenset[str] = frozenset()  # parameters that must be true for its collectives
    sequence: tuple[str, ...] | None = None  # what every call issues, when no path differs


@dataclass
class Program:
    """Every function of the linted files and of the project modules they import, found by
    name, with its summary. ``context`` holds the paths of the modules read for their
    summaries only (no finding is reported in them)."""

    modules: list[ParsedModule]
    context: set[str] = field(default_factory=set)
    functions: dict[tuple[str, str], FunctionInfo] = field(default_factory=dict)
    by_node: dict[int, FunctionInfo] = field(default_factory=dict)
    top_level: dict[str, list[FunctionInfo]] = field(default_factory=dict)
    ddp_modules: set[str] = field(default_factory=set)
    spawn_targets: set[str] = field(default_factory=set)
    calls: dict[int, list[FunctionInfo]] = field(default_factory=dict)  # id(info) -> callees
    monitors: dict[str, str] = field(default_factory=dict)  # metric key -> the callback
    objects: ObjectFacts = field(default_factory=ObjectFacts)  # taint in attributes, params
    by_file: dict[Path, ParsedModule] = field(default_factory=dict)
    nested: dict[tuple[str, str], list[tuple[FunctionNode, FunctionInfo]]] = field(
        default_factory=dict)  # (path, name) -> (the function that defines it, it)
    ddp_params: dict[int, frozenset[str]] = field(default_factory=dict)  # id(node) -> params

    def params_given_ddp(self, info: FunctionInfo) -> frozenset[str]:
        """The parameters of ``info`` that a call in the program hands a DDP model."""
        return self.ddp_params.get(id(info.node), frozenset())

    def resolve(self, call: ast.Call, module: ParsedModule, cls: str | None) -> FunctionInfo | None:
        """The linted function a call reaches: ``f()``, ``self.m()``, a function of a project
        module it imports (``helpers.f()``, ``from .dist import f``), a function defined
        inside another; None when unknown."""
        func = call.func
        if isinstance(func, ast.Name):
            own = self.functions.get((module.path, func.id))
            if own is not None:
                return own
            imported = module.aliases.get(func.id)
            if imported is not None:
                found = self._imported(imported, module)
                if isinstance(found, FunctionInfo):
                    return found
                if found is None and imported.rsplit(".", 1)[-1] in self.top_level and \
                        not module.import_files:
                    return self.top_level[imported.rsplit(".", 1)[-1]][0]
                return None
            return self._nested(module, func.id, call.lineno)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id in ("self", "cls") and cls is not None:
            return self.functions.get((module.path, f"{cls}.{func.attr}"))
        if isinstance(func, ast.Attribute) and module.import_files:
            found = self._imported(module.qualified(func) or "", module)
            return found if isinstance(found, FunctionInfo) else None
        return None

    def _nested(self, module: ParsedModule, name: str, line: int) -> FunctionInfo | None:
        """The function ``name`` defined inside the innermost function around ``line`` that
        defines one (a closure called where it is visible)."""
        best: tuple[int, FunctionInfo] | None = None
        for outer, info in self.nested.get((module.path, name), ()):
            if outer.lineno <= line <= (outer.end_lineno or outer.lineno) and \
                    (best is None or outer.lineno > best[0]):
                best = (outer.lineno, info)
        return best[1] if best is not None else None

    def _imported(self, qualified: str, module: ParsedModule) -> FunctionInfo | ast.ClassDef \
            | None:
        """What a dotted name means in a project module ``module`` imports: a function, a
        class, a class's method (``pkg.mod.Class.method``)."""
        parts = qualified.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            file = module.import_files.get(".".join(parts[:cut]))
            if file is None:
                continue
            target = self.by_file.get(file)
            if target is None:
                return None
            rest = parts[cut:]
            if len(rest) == 1:
                found = self.functions.get((target.path, rest[0]))
                return found if found is not None else target.classes().get(rest[0])
            if len(rest) == 2:
                return self.functions.get((target.path, f"{rest[0]}.{rest[1]}"))
            return None
        return None

    def resolve_class(self, call: ast.Call, module: ParsedModule) -> ast.ClassDef | None:
        """The linted class a call builds (``TrainState(...)``, an imported project class)."""
        name = module.qualified(call.func) or ""
        own = module.classes().get(name)
        if own is not None or not module.import_files:
            return own
        found = self._imported(name, module)
        return found if isinstance(found, ast.ClassDef) else None

    def class_module(self, cls: ast.ClassDef, module: ParsedModule) -> ParsedModule:
        """The module that defines ``cls`` (``module`` or a project module it imports)."""
        if module.classes().get(cls.name) is cls:
            return module
        for file in module.import_files.values():
            target = self.by_file.get(file)
            if target is not None and target.classes().get(cls.name) is cls:
                return target
        return module


def index(program: Program) -> None:
    """Every function of the program by name and by node, and what the files' calls say."""
    for module in program.modules:
        if module.file is not None:
            program.by_file.setdefault(module.file, module)
    for module in program.modules:
        for node in module.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info = FunctionInfo(node, module, None)
                program.functions[(module.path, node.name)] = info
                program.top_level.setdefault(node.name, []).append(info)
                program.by_node[id(node)] = info
                _index_nested(program, module, node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info = FunctionInfo(item, module, node.name)
                        program.functions[(module.path, f"{node.name}.{item.name}")] = info
                        program.by_node[id(item)] = info
                        _index_nested(program, module, item)
        if module.path in program.context:
            continue
        _index_calls(program, module)


def _index_nested(program: Program, module: ParsedModule, outer: FunctionNode) -> None:
    """Functions defined inside ``outer`` (a helper closure), at any depth: each found by its
    name from a call inside the function that defines it (Program.resolve)."""
    for node in module.inner_functions(outer):
        info = FunctionInfo(node, module, None, nested=True)
        program.functions[(module.path, f"<nested {id(node)}>.{node.name}")] = info
        program.by_node[id(node)] = info
        program.nested.setdefault((module.path, node.name), []).append((outer, info))
        _index_nested(program, module, node)


def _index_calls(program: Program, module: ParsedModule) -> None:
    """What the file's calls say of the job: a DDP wrap, a monitored metric, a spawn target."""
    for node in module.nodes():
        if isinstance(node, ast.arg) and ddp_annotation(node, module):
            program.ddp_modules.add(module.path)  # def train(model: DDP, ...)
        if isinstance(node, ast.Call):
            name = module.qualified(node.func) or ""
            if any(n in name for n in DDP_MARKERS):
                program.ddp_modules.add(module.path)
            if name.endswith(MONITORING):
                for k in node.keywords:
                    if k.arg == "monitor" and isinstance(k.value, ast.Constant) and \
                            isinstance(k.value.value, str):
                        program.monitors[k.value.value] = name.rsplit(".", 1)[-1]
            if name.endswith((".spawn", "start_processes")) and node.args and \
                    isinstance(node.args[0], ast.Name):
                program.spawn_targets.add(node.args[0].id)
            if name.endswith("Process"):  # Process(target=run, args=(rank, ...))
                program.spawn_targets.update(
                    k.value.id for k in node.keywords
                    if k.arg == "target" and isinstance(k.value, ast.Name))
            if name.endswith(".run") and "Parallel" in ast.unparse(node.func) and \
                    node.args and isinstance(node.args[0], ast.Name):
                program.spawn_targets.add(node.args[0].id)


def ddp_annotation(arg: ast.arg, module: ParsedModule) -> bool:
    """A parameter annotated as a DDP (or FSDP) model: ``def train(model: DDP, ...)``."""
    if arg.annotation is None:
        return False
    name = module.qualified(arg.annotation) or ""
    return name.endswith(("DistributedDataParallel", "FullyShardedDataParallel"))


def static_kinds(node: FunctionNode | ast.Module | ast.ClassDef, module: ParsedModule,
                 ddp_params: frozenset[str] = frozenset()) -> dict[str, frozenset[str]]:
    """What objects a function's names hold, from its assignments alone (for summaries), and
    its parameters that its callers hand a DDP model (Program.ddp_params)."""
    kinds: dict[str, frozenset[str]] = {p: frozenset({"ddp"}) for p in ddp_params}
    for stmt, found in _assigned_kinds(module, node):
        for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, ast.Call):
                for key, more in unpacked_kinds(target.elts, stmt.value, module).items():
                    kinds[key] = kinds.get(key, frozenset()) | more
                continue
            key = key_of(target)
            if key is not None and found:
                kinds[key] = kinds.get(key, frozenset()) | found
    return kinds


def class_kinds(module: ParsedModule, cls: str) -> dict[str, frozenset[str]]:
    """What the attributes of a class's objects hold (``self.fabric = Fabric(...)`` in any of
    its methods), and ``self`` when the class inherits a framework's; once per file."""
    cache = module.__dict__.setdefault("_class_kinds", {})
    found = cache.get(cls)
    if found is None:
        node = module.classes().get(cls)
        found = cache[cls] = {**(static_kinds(node, module) if node is not None else {}),
                              **self_kinds(module, cls)}
    return found


def scope_kinds(info: FunctionInfo, ddp_params: frozenset[str] = frozenset()) \
        -> dict[str, frozenset[str]]:
    """What objects a function's names hold before it runs a line, for its summary: its class's
    attributes, its parameters (by annotation or a framework hook's signature) and its own
    assignments."""
    kinds = class_kinds(info.module, info.cls) if info.cls is not None else {}
    return {**kinds, **param_kinds(info.node, info.module, info.cls),
            **static_kinds(info.node, info.module, ddp_params)}


def _assigned_kinds(module: ParsedModule, scope: ast.AST) \
        -> list[tuple[ast.Assign | ast.AnnAssign, frozenset[str]]]:
    """The assignments of a call's result under ``scope`` whose result is an object lint
    knows (call_kinds), and the names annotated with a framework's class, found once per file
    and sliced by scope."""
    table = module.__dict__.get("_assigned_kinds")
    if table is None:
        order = module.nodes()
        table = ([], [])
        for i, n in enumerate(order):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                found = call_kinds(n.value, module)
                if found or (module.qualified(n.value.func) or "") in TUPLE_BUILDERS:
                    table[0].append(i)
                    table[1].append((n, found))
            elif isinstance(n, ast.AnnAssign):  # self.trainer: Trainer | None = None
                kind = annotated_kind(n.annotation, module)
                if kind is not None:
                    table[0].append(i)
                    table[1].append((n, frozenset({kind})))
        module.__dict__["_assigned_kinds"] = table
    span = module.span(scope)
    if span is None:
        return list(table[1])
    lo, hi = bisect_left(table[0], span[0]), bisect_left(table[0], span[1])
    return table[1][lo:hi]


DDP_PARAM_ROUNDS = 3  # a model handed down through helpers rarely goes deeper


def ddp_params(program: Program) -> None:
    """The parameters each function is handed a DDP model in: by a call, in a file that wraps
    one, whose argument holds a DDP object there (``train(model, ...)`` after ``model =
    DDP(net)``), or holds one as a parameter of the caller's that is handed one in turn."""
    scopes: list[tuple[ParsedModule, ast.AST, str | None]] = []
    for module in program.modules:
        if module.path in program.ddp_modules:
            scopes.append((module, module.tree, None))
    scopes += [(info.module, info.node, info.cls) for info in program.functions.values()
               if info.module.path in program.ddp_modules]
    base = {id(scope): static_kinds(scope, module) for module, scope, _ in scopes}
    calls = {id(scope): [n for n in module.own_nodes(scope) if isinstance(n, ast.Call)]
             for module, scope, _ in scopes}
    for _ in range(DDP_PARAM_ROUNDS):
        grown = False
        for module, scope, cls in scopes:
            kinds = base[id(scope)]
            given = program.ddp_params.get(id(scope), frozenset())
            for call in calls[id(scope)]:
                callee = program.resolve(call, module, cls)
                if callee is None:
                    continue
                bound = bound_arguments(call, callee.node, callee.cls is not None)
                found = {p for p, a in bound.items() if key_of(a) is not None and (
                    "ddp" in kinds.get(key_of(a) or "", ()) or key_of(a) in given)}
                before = program.ddp_params.get(id(callee.node), frozenset())
                if not found <= before:
                    program.ddp_params[id(callee.node)] = before | found
                    grown = True
        if not grown:
            return
