"""The outline summary of a function that holds no source of rank-dependent values (none that
lint/sources.py finds) and issues no collective: which of its parameters reach its return
value, read from its assignments alone (flow-insensitive, through the conditions they sit
under), and whether the way passes through a call lint does not know. Such a function's result differs between ranks only as its
arguments do, so the full walk (lint/walker.py) is not needed to say so."""

from __future__ import annotations

import ast

from ddpdoctor.lint.module import own
from ddpdoctor.lint.known_calls import known_call
from ddpdoctor.lint.taint import Taint, TaintKind


def _names(node: ast.AST | None) -> tuple[set[str], bool]:
    """The names an expression reads, and whether it calls something lint does not know."""
    if node is None:
        return set(), False
    names: set[str] = set()
    unknown = False
    for n in [node, *own(node)]:
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Call):
            unknown = unknown or not known_call(_dotted(n.func), n)
    return names, unknown


def _dotted(func: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in [node, *own(node)] if isinstance(n, ast.Name)}


def param_reach(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Taint | None:
    """The parameters that reach the return value (a PARAM taint carrying them, unseen when
    the way passes through an unknown call), or None when none does."""
    args = node.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}
    deps: dict[str, set[str]] = {}
    dark: set[str] = set()  # names set through an unknown call
    returned: set[str] = set()
    returned_dark = False

    def visit(stmts: list[ast.stmt], control: set[str]) -> None:
        nonlocal returned_dark
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                used, unknown = _names(stmt.value)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for name in _targets(target):
                        deps.setdefault(name, set()).update(used | control)
                        if unknown:
                            dark.add(name)
            elif isinstance(stmt, ast.Return):
                used, unknown = _names(stmt.value)
                returned.update(used | control)
                returned_dark = returned_dark or unknown
            elif isinstance(stmt, (ast.If, ast.While)):
                used, _ = _names(stmt.test)
                visit(stmt.body, control | used)
                visit(stmt.orelse, control | used)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                used, unknown = _names(stmt.iter)
                for name in _targets(stmt.target):
                    deps.setdefault(name, set()).update(used | control)
                    if unknown:
                        dark.add(name)
                visit(stmt.body, control | used)
                visit(stmt.orelse, control)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    if item.optional_vars is not None:
                        used, unknown = _names(item.context_expr)
                        for name in _targets(item.optional_vars):
                            deps.setdefault(name, set()).update(used)
                            if unknown:
                                dark.add(name)
                visit(stmt.body, control)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body, control)
                for handler in stmt.handlers:
                    visit(handler.body, control)
                visit(stmt.orelse, control)
                visit(stmt.finalbody, control)

    visit(node.body, set())
    seen: set[str] = set()
    stack = list(returned)
    unseen = returned_dark
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        unseen = unseen or name in dark
        stack.extend(deps.get(name, ()))
    reach = frozenset(seen & params)
    if not reach:
        return None
    return Taint(TaintKind.PARAM, node.lineno, unseen=f"`{node.name}()`" if unseen else "",
                 params=reach)
