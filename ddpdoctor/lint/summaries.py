"""Interprocedural summaries: which functions of the linted files issue collectives, and which
return a value that differs between ranks (a fixpoint over the calls between them)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ddpdoctor.lint.attributes import ObjectFacts
from ddpdoctor.lint.collectives import Site, call_kinds, classify
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.taint import Taint, key_of

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
NO_GRAD_CALLS = ("no_grad", "inference_mode")
DDP_MARKERS = ("DistributedDataParallel", "FullyShardedDataParallel", "auto_model", ".prepare",
               "Trainer", "Fabric")  # calls that make a file's backward a gradient all-reduce
NESTED_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
MONITORING = ("ModelCheckpoint", "EarlyStopping")  # callbacks that read a logged metric
MODEL_PARAMS = frozenset({"model", "ddp_model", "net", "module", "wrapped_model"})
RANK_DECORATORS = ("rank_zero_only", "on_main_process", "on_local_main_process",
                   "main_process_only", "on_process", "on_local_process")


@dataclass
class FunctionInfo:
    """A function (or method) defined in a linted file."""

    node: FunctionNode
    module: ParsedModule
    cls: str | None
    site: Site | None = None  # the first collective it issues, directly or through calls
    returns: Taint | None = None  # the taint of what it returns


@dataclass
class Program:
    """Every function of the linted files, found by name, with its summary."""

    modules: list[ParsedModule]
    functions: dict[tuple[str, str], FunctionInfo] = field(default_factory=dict)
    by_node: dict[int, FunctionInfo] = field(default_factory=dict)
    top_level: dict[str, list[FunctionInfo]] = field(default_factory=dict)
    ddp_modules: set[str] = field(default_factory=set)
    spawn_targets: set[str] = field(default_factory=set)
    calls: dict[int, list[FunctionInfo]] = field(default_factory=dict)  # id(info) -> callees
    monitors: dict[str, str] = field(default_factory=dict)  # metric key -> the callback
    objects: ObjectFacts = field(default_factory=ObjectFacts)  # taint in attributes, params

    def resolve(self, call: ast.Call, module: ParsedModule, cls: str | None) -> FunctionInfo | None:
        """The linted function a call reaches: ``f()`` or ``self.m()``; None when unknown."""
        func = call.func
        if isinstance(func, ast.Name):
            own = self.functions.get((module.path, func.id))
            if own is not None:
                return own
            imported = module.aliases.get(func.id)
            if imported is not None and imported.rsplit(".", 1)[-1] in self.top_level:
                return self.top_level[imported.rsplit(".", 1)[-1]][0]
            return None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id in ("self", "cls") and cls is not None:
            return self.functions.get((module.path, f"{cls}.{func.attr}"))
        return None


    def resolve_class(self, call: ast.Call, module: ParsedModule) -> ast.ClassDef | None:
        """The linted class a call builds (``TrainState(...)``), if any."""
        return module.classes().get(module.qualified(call.func) or "")


def _index(program: Program) -> None:
    for module in program.modules:
        for node in module.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info = FunctionInfo(node, module, None)
                program.functions[(module.path, node.name)] = info
                program.top_level.setdefault(node.name, []).append(info)
                program.by_node[id(node)] = info
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        info = FunctionInfo(item, module, node.name)
                        program.functions[(module.path, f"{node.name}.{item.name}")] = info
                        program.by_node[id(item)] = info
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
                 has_ddp: bool) -> dict[str, frozenset[str]]:
    """What objects a function's names hold, from its assignments alone (for summaries)."""
    kinds: dict[str, frozenset[str]] = {}
    if has_ddp and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for arg in node.args.args:
            if arg.arg in MODEL_PARAMS:
                kinds[arg.arg] = frozenset({"ddp"})
    for stmt in module.nodes(node):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            found = call_kinds(stmt.value, module)
            for target in stmt.targets:
                key = key_of(target)
                if found and key is not None:
                    kinds[key] = kinds.get(key, frozenset()) | found
    return kinds


def with_flags(items: list[ast.withitem], module: ParsedModule, no_grad: bool,
               no_sync: bool) -> tuple[bool, bool]:
    """The (no_grad, no_sync) state inside ``with`` items."""
    for item in items:
        expr = item.context_expr
        if not isinstance(expr, ast.Call):
            continue
        name = module.qualified(expr.func) or ""
        if name.endswith(NO_GRAD_CALLS):
            no_grad = True
        elif name.endswith("set_grad_enabled") and expr.args and \
                isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False:
            no_grad = True
        elif name.endswith("no_sync"):
            no_sync = True
    return no_grad, no_sync


@dataclass
class SiteScanner:
    """Finds the collectives that statements issue, in order (nested functions aside)."""

    program: Program
    module: ParsedModule
    kinds: dict[str, frozenset[str]]
    cls: str | None

    def scan(self, stmts: list[ast.stmt], no_grad: bool = False,
             no_sync: bool = False) -> list[Site]:
        sites: list[Site] = []
        for stmt in stmts:
            sites.extend(self.scan_stmt(stmt, no_grad, no_sync))
        return sites

    def scan_stmt(self, stmt: ast.stmt, no_grad: bool, no_sync: bool) -> list[Site]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return []
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            sites = self.calls([i.context_expr for i in stmt.items], no_grad, no_sync)
            inner = with_flags(stmt.items, self.module, no_grad, no_sync)
            return sites + self.scan(stmt.body, *inner)
        if isinstance(stmt, (ast.If, ast.While)):
            return (self.calls([stmt.test], no_grad, no_sync) +
                    self.scan(stmt.body, no_grad, no_sync) +
                    self.scan(stmt.orelse, no_grad, no_sync))
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            return (self.calls([stmt.iter], no_grad, no_sync) +
                    self.scan(stmt.body, no_grad, no_sync) +
                    self.scan(stmt.orelse, no_grad, no_sync))
        if isinstance(stmt, ast.Try):
            sites = self.scan(stmt.body, no_grad, no_sync)
            for handler in stmt.handlers:
                sites += self.scan(handler.body, no_grad, no_sync)
            return sites + self.scan(stmt.orelse, no_grad, no_sync) + \
                self.scan(stmt.finalbody, no_grad, no_sync)
        return self.calls([stmt], no_grad, no_sync)

    def calls(self, nodes: list[ast.AST], no_grad: bool, no_sync: bool) -> list[Site]:
        found: list[ast.Call] = []
        stack = list(nodes)
        while stack:
            node = stack.pop()
            if isinstance(node, NESTED_SCOPES):
                continue
            if isinstance(node, ast.Call):
                found.append(node)
            for name in node._fields:
                value = getattr(node, name, None)
                if isinstance(value, ast.AST):
                    stack.append(value)
                elif isinstance(value, list):
                    stack.extend(v for v in value if isinstance(v, ast.AST))
        found.sort(key=lambda c: (c.end_lineno or 0, c.end_col_offset or 0))
        sites = []
        for call in found:
            site = self.site_of(call, no_grad, no_sync)
            if site is not None:
                sites.append(site)
        return sites

    def site_of(self, call: ast.Call, no_grad: bool, no_sync: bool) -> Site | None:
        site = classify(call, self.module, self.kinds, no_grad, no_sync,
                        self.module.path in self.program.ddp_modules)
        if site is not None:
            return site
        callee = self.program.resolve(call, self.module, self.cls)
        if callee is not None and callee.site is not None:
            name = callee.node.name
            return Site(f"{name}() (which calls {callee.site.name.split(' (')[0]})",
                        call.lineno, f"{name}()")
        return None


def summarise_collectives(program: Program) -> None:
    """Mark every function that issues a collective, directly or through the linted files'
    functions it calls: each function is scanned once, and again only when a callee of its
    is newly marked (a worklist over the reversed call graph: linear in its size)."""
    _index(program)
    callers: dict[int, list[FunctionInfo]] = {}
    for info in program.functions.values():
        for callee in callees(program, info):
            callers.setdefault(id(callee), []).append(info)
    work = list(program.functions.values())
    while work:
        info = work.pop()
        if info.site is not None:
            continue
        has_ddp = info.module.path in program.ddp_modules
        scanner = SiteScanner(program, info.module,
                              static_kinds(info.node, info.module, has_ddp), info.cls)
        sites = scanner.scan(info.node.body, no_grad_decorated(info.node, info.module))
        if sites:
            info.site = sites[0]
            work.extend(c for c in callers.get(id(info), ()) if c.site is None)


def callees(program: Program, info: FunctionInfo) -> list[FunctionInfo]:
    """The linted functions ``info`` calls (each once; kept on the program)."""
    known = program.calls.get(id(info))
    if known is not None:
        return known
    found: dict[int, FunctionInfo] = {}
    for node in info.module.nodes(info.node):
        if isinstance(node, ast.Call):
            callee = program.resolve(node, info.module, info.cls)
            if callee is not None and callee is not info:
                found[id(callee)] = callee
    program.calls[id(info)] = list(found.values())
    return program.calls[id(info)]


def callee_first(program: Program) -> list[FunctionInfo]:
    """Every function, callees before their callers where the call graph allows (an
    iterative post-order: a cycle is cut where it is met), so that one pass in this order
    carries what functions return up a chain of calls of any depth."""
    order: list[FunctionInfo] = []
    done: set[int] = set()
    for root in program.functions.values():
        if id(root) in done:
            continue
        done.add(id(root))
        stack = [(root, iter(callees(program, root)))]
        while stack:
            info, pending = stack[-1]
            nxt = next((c for c in pending if id(c) not in done), None)
            if nxt is None:
                stack.pop()
                order.append(info)
            else:
                done.add(id(nxt))
                stack.append((nxt, iter(callees(program, nxt))))
    return order


def no_grad_decorated(node: FunctionNode, module: ParsedModule) -> bool:
    """``@torch.no_grad()`` (or ``inference_mode``) on a function: its body runs without grad."""
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (module.qualified(target) or "").endswith(NO_GRAD_CALLS):
            return True
    return False


def rank_decorator(node: FunctionNode) -> ast.expr | None:
    """The decorator that runs the function on some ranks only (``@rank_zero_only``)."""
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        text = ast.unparse(target)
        if text.endswith(RANK_DECORATORS):
            return dec
    return None
