"""Interprocedural summaries: which functions of the linted files issue collectives, and which
return a value that differs between ranks (a fixpoint over the calls between them)."""

from __future__ import annotations

import ast
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.lint import hidden_collectives
from ddpdoctor.lint.attributes import ObjectFacts
from ddpdoctor.lint.collectives import Site, call_kinds, classify, flat
from ddpdoctor.lint.module import ParsedModule, own
from ddpdoctor.lint.known_calls import bound_arguments
from ddpdoctor.lint.taint import Taint, key_of

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
NO_GRAD_CALLS = ("no_grad", "inference_mode")
DDP_MARKERS = ("DistributedDataParallel", "FullyShardedDataParallel", "auto_model", ".prepare",
               "Trainer", "Fabric")  # calls that make a file's backward a gradient all-reduce
NESTED_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
MONITORING = ("ModelCheckpoint", "EarlyStopping")  # callbacks that read a logged metric
RANK_DECORATORS = ("rank_zero_only", "on_main_process", "on_local_main_process",
                   "main_process_only", "on_process", "on_local_process")


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


def _index(program: Program) -> None:
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
        for target in stmt.targets:
            key = key_of(target)
            if key is not None:
                kinds[key] = kinds.get(key, frozenset()) | found
    return kinds


def _assigned_kinds(module: ParsedModule, scope: ast.AST) -> list[tuple[ast.Assign, frozenset[str]]]:
    """The assignments of a call's result under ``scope`` whose result is an object lint
    knows (call_kinds), found once per file and sliced by scope."""
    table = module.__dict__.get("_assigned_kinds")
    if table is None:
        order = module.nodes()
        table = ([], [])
        for i, n in enumerate(order):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                found = call_kinds(n.value, module)
                if found:
                    table[0].append(i)
                    table[1].append((n, found))
        module.__dict__["_assigned_kinds"] = table
    span = module.span(scope)
    if span is None:
        return list(table[1])
    lo, hi = bisect_left(table[0], span[0]), bisect_left(table[0], span[1])
    return table[1][lo:hi]


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
        sites = []
        for call in calls_under(nodes, self.module):
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
        if callee is not None and callee.site is not None and \
                not switched_off(call, callee):
            name = callee.node.name
            return Site(f"{name}() (which calls {callee.site.name.split(' (')[0]})",
                        call.lineno, f"{name}()", certain=callee.site.certain,
                        seq=callee.sequence or ())
        return None

    def sequence(self, stmts: list[ast.stmt], no_grad: bool = False,
                 no_sync: bool = False) -> list[str] | None:
        """The collectives ``stmts`` issue on every path, in order (p2p ops aside); None when
        a branch, a loop, a handler or a jump can change them."""
        out: list[str] = []
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                inner = with_flags(stmt.items, self.module, no_grad, no_sync)
                body = self.sequence(stmt.body, *inner)
                if body is None:
                    return None
                out += flat(self.calls([i.context_expr for i in stmt.items], no_grad,
                                       no_sync)) + body
            elif isinstance(stmt, COMPOUND):
                if self.scan_stmt(stmt, no_grad, no_sync) or _jumps(stmt):
                    return None
            else:
                for call in calls_under([stmt], self.module):
                    site = self.site_of(call, no_grad, no_sync)
                    if site is None or site.p2p:
                        continue
                    if site.seq or classify(call, self.module, self.kinds, no_grad, no_sync,
                                            self.module.path in self.program.ddp_modules):
                        out += flat([site])
                    else:
                        return None  # a helper whose collectives differ by path
        return out


def calls_under(nodes: list[ast.AST], module: ParsedModule) -> list[ast.Call]:
    """The calls under ``nodes`` (nested functions, classes and lambdas aside), in the order
    they complete; kept per node on the file (the walk asks for the same statements often)."""
    cache = module.__dict__.setdefault("_calls_under", {})
    if len(nodes) == 1 and id(nodes[0]) in cache:
        return cache[id(nodes[0])]
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
    if len(nodes) == 1:
        cache[id(nodes[0])] = found
    return found


def summarise_collectives(program: Program) -> None:
    """Mark every function that issues a collective, directly or through the linted files'
    functions it calls: each function is scanned once, and again only when a callee of its
    is newly marked (a worklist over the reversed call graph: linear in its size)."""
    _index(program)
    _ddp_params(program)
    callers: dict[int, list[FunctionInfo]] = {}
    for info in program.functions.values():
        for callee in callees(program, info):
            callers.setdefault(id(callee), []).append(info)
    work = list(program.functions.values())
    while work:
        info = work.pop()
        if info.site is not None:
            continue
        scanner = SiteScanner(program, info.module,
                              static_kinds(info.node, info.module,
                                           program.params_given_ddp(info)), info.cls)
        sites = scanner.scan(info.node.body, no_grad_decorated(info.node, info.module))
        if sites:
            info.site = next((site for site in sites if site.certain), sites[0])
            info.switches = switches(scanner, info)
            work.extend(c for c in callers.get(id(info), ()) if c.site is None)
    _sequences(program)


DDP_PARAM_ROUNDS = 3  # a model handed down through helpers rarely goes deeper


def _ddp_params(program: Program) -> None:
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


COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match)


def _jumps(stmt: ast.stmt) -> bool:
    """A compound statement that may leave the function (a return or raise inside it)."""
    return any(isinstance(n, (ast.Return, ast.Raise)) for n in own(stmt))


def _sequences(program: Program) -> None:
    """What each function that issues collectives issues on every call, callees first (a
    function in a cycle of calls is left as itself)."""
    for info in callee_first(program):
        if info.site is None or info.switches:
            continue
        scanner = SiteScanner(program, info.module,
                              static_kinds(info.node, info.module,
                                           program.params_given_ddp(info)), info.cls)
        found = scanner.sequence(info.node.body, no_grad_decorated(info.node, info.module))
        info.sequence = tuple(found) if found else None


def switches(scanner: SiteScanner, info: FunctionInfo) -> frozenset[str]:
    """The parameters every collective of the function sits under (``if synchronize:
    barrier()``): a call that passes them false issues none."""
    params = {a.arg for a in [*info.node.args.posonlyargs, *info.node.args.args,
                              *info.node.args.kwonlyargs]}
    guards: set[str] = set()

    def unguarded(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in stmts:
            if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Name) and \
                    stmt.test.id in params and not stmt.orelse:
                if scanner.scan(stmt.body):
                    guards.add(stmt.test.id)
                continue
            out.append(stmt)
        return out

    rest = unguarded(info.node.body)
    if not guards or scanner.scan(rest):
        return frozenset()
    return frozenset(guards)


def switched_off(call: ast.Call, callee: FunctionInfo) -> bool:
    """True when the call passes false (a false constant, or nothing where the default is
    one) to a parameter every collective of the callee needs true."""
    if not callee.switches:
        return False
    bound = bound_arguments(call, callee.node, callee.cls is not None)
    defaults = _defaults(callee.node)
    for name in callee.switches:
        value = bound.get(name, defaults.get(name))
        if isinstance(value, ast.Constant) and not value.value:
            return True
    return False


def _defaults(node: FunctionNode) -> dict[str, ast.expr]:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    out = {a.arg: d for a, d in zip(positional[len(positional) - len(args.defaults):],
                                    args.defaults)}
    out.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return out


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


def summarise_framework_method(module: ParsedModule, qualname: str) -> tuple[str, bool] | None:
    """A framework's method read as the user's code is (lint/hidden_collectives.py): the first
    collective it reaches ("" for none), and whether it reaches one on every call (a collective
    at its top level, not under a condition or in a loop); None when it is not there."""
    program = Program([module])
    summarise_collectives(program)
    info = program.functions.get((module.path, qualname))
    if info is None:
        return None
    if info.site is None:
        return "", False
    scanner = SiteScanner(program, module, static_kinds(info.node, module), info.cls)
    top = [s for s in info.node.body if not isinstance(s, (ast.If, ast.Try, ast.For, ast.While,
                                                            ast.Match))]
    return info.site.name.split(" (")[0], bool(scanner.scan(top))


hidden_collectives.summarise_method = summarise_framework_method
