"""Interprocedural summaries: which functions of the linted files issue collectives, and which
return a value that differs between ranks (a fixpoint over the calls between them)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.lint import hidden_collectives
from ddpdoctor.lint.collectives import Site, classify, flat
from ddpdoctor.lint.known_calls import bound_arguments
from ddpdoctor.lint.module import ParsedModule, own
from ddpdoctor.lint.program import FunctionInfo, FunctionNode, Program, ddp_params, index, \
    scope_kinds

NO_GRAD_CALLS = ("no_grad", "inference_mode")
NESTED_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
RANK_DECORATORS = ("rank_zero_only", "on_main_process", "on_local_main_process",
                   "main_process_only", "on_process", "on_local_process")


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
    index(program)
    ddp_params(program)
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
                              scope_kinds(info, program.params_given_ddp(info)), info.cls)
        sites = scanner.scan(info.node.body, no_grad_decorated(info.node, info.module))
        if sites:
            info.site = next((site for site in sites if site.certain), sites[0])
            info.switches = switches(scanner, info)
            work.extend(c for c in callers.get(id(info), ()) if c.site is None)
    _sequences(program)


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
                              scope_kinds(info, program.params_given_ddp(info)), info.cls)
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
    scanner = SiteScanner(program, module, scope_kinds(info), info.cls)
    top = [s for s in info.node.body if not isinstance(s, (ast.If, ast.Try, ast.For, ast.While,
                                                            ast.Match))]
    return info.site.name.split(" (")[0], bool(scanner.scan(top))


hidden_collectives.summarise_method = summarise_framework_method
