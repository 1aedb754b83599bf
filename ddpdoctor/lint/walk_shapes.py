"""The shapes of code the walker (lint/walker.py) reads at a glance: a function that hands back
its argument, the side of a process-group test that runs in one process, a tuple return's items,
the rank a function tells ``init_process_group``, the ``next()`` whose ``StopIteration`` a
handler catches, a block that ends in a jump, a condition's polarity."""

from __future__ import annotations

import ast

from ddpdoctor.lint.module import ParsedModule, own
from ddpdoctor.lint.taint import Taint, TaintKind, stronger
from ddpdoctor.lint.uniformity import callee_name, is_presence_test, strip_wrappers


def hands_back_argument(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True when every ``return`` hands back the same argument, bare or in a length-preserving
    wrapper (``return tqdm(it) if ... else it``, a progress-bar helper): the paths differ in
    the wrapper only, so the result is the argument whichever path is taken."""
    params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
    bases: set[str] = set()
    for n in own(node):
        if isinstance(n, ast.Return):
            base = strip_wrappers(n.value) if n.value is not None else None
            if not isinstance(base, ast.Name) or base.id not in params:
                return False
            bases.add(base.id)
    return len(bases) == 1


DISTRIBUTED_WHEN_TRUE = ("is_initialized", "is_available", "is_distributed")


def single_side(test: ast.expr, taint_of) -> int | None:
    """Which side of an ``if`` on the process group's presence runs in a single process: 1 for
    ``if dist.is_initialized():`` or ``if world_size > 1:`` (the ``else``), 0 for their
    negations (``if not dist.is_available() or not dist.is_initialized():``,
    ``if world_size == 1:``); None when it cannot be told."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = single_side(test.operand, taint_of)
        return None if inner is None else 1 - inner
    if isinstance(test, ast.BoolOp):
        sides = [single_side(v, taint_of) for v in test.values]
        if isinstance(test.op, ast.And) and 1 in sides:
            return 1  # distributed only when every term says so
        if isinstance(test.op, ast.Or) and 0 in sides:
            return 0  # single as soon as one term says so
        return None
    if isinstance(test, ast.Call):
        return 1 if callee_name(test.func) in DISTRIBUTED_WHEN_TRUE else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and \
            isinstance(test.comparators[0], ast.Constant) and \
            isinstance(test.comparators[0].value, int):
        t = taint_of(test.left)
        if t is None or t.kind != TaintKind.WORLD:
            return None
        op, n = type(test.ops[0]), test.comparators[0].value
        if (op is ast.Gt and n == 1) or (op is ast.GtE and n == 2) or (op is ast.NotEq and n == 1):
            return 1
        if (op is ast.Eq and n == 1) or (op is ast.Lt and n == 2) or (op is ast.LtE and n == 1):
            return 0
    return None


RANK_ABSENT_WHEN_TRUE = {ast.Eq: True, ast.Is: True, ast.NotEq: False, ast.IsNot: False}


def absent_side(test: ast.expr, taint_of) -> int | None:
    """Which side of a test of the rank's presence runs in a single process (no launcher gave
    a rank): 0 for ``if args.local_rank == -1:`` (or ``is None``), 1 for ``!= -1``; None for
    any other test."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = absent_side(test.operand, taint_of)
        return None if inner is None else 1 - inner
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    absent = RANK_ABSENT_WHEN_TRUE.get(type(test.ops[0]))
    t = taint_of(test.left)
    if absent is None or t is None or t.kind != TaintKind.RANK or \
            not is_presence_test(test, test.left):
        return None
    return 0 if absent else 1


def merge_items(old: list[Taint | None] | None, new: list[Taint | None] | None) \
        -> list[Taint | None] | None:
    """Item-by-item taints of a tuple return joined over the summary's rounds ([]: the
    function returns something else on some path)."""
    if old is None or new is None:
        return new if old is None else old
    if not old or not new or len(old) != len(new):
        return []
    return [stronger(a, b) for a, b in zip(old, new)]


def told_rank(node: ast.FunctionDef | ast.AsyncFunctionDef, module: ParsedModule) -> set[str]:
    """The names a function hands ``init_process_group`` as the rank (``rank=proc_id``): what
    the process group is told this process's rank is, is the rank."""
    names: set[str] = set()
    for n in module.own_nodes(node):
        if isinstance(n, ast.Call) and callee_name(n.func) == "init_process_group":
            names.update(k.value.id for k in n.keywords
                         if k.arg == "rank" and isinstance(k.value, ast.Name))
    return names


def iterator_end(handler: ast.ExceptHandler, body: list[ast.stmt]) -> int | None:
    """The line of the ``next(it)`` whose ``StopIteration`` the handler catches: the end of
    this rank's own iterator, which the other ranks' need not share (its loader may hold fewer
    batches); None when the handler catches something else or the body calls no ``next``."""
    kind = handler.type
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind] if kind is not None else []
    if not any(callee_name(n) in ("StopIteration", "StopAsyncIteration") for n in names):
        return None
    for stmt in body:
        for node in [stmt, *own(stmt)]:
            if isinstance(node, ast.Call) and callee_name(node.func) in ("next", "__next__",
                                                                          "anext"):
                return node.lineno
    return None


def ends_in_jump(stmts: list[ast.stmt]) -> bool:
    """True when a block ends in continue, break, return or raise."""
    return bool(stmts) and isinstance(stmts[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))


def cond_key(test: ast.expr) -> tuple[str, bool] | None:
    """A condition as (what it tests, polarity): ``rank == 0`` and ``rank in (-1, 0)`` test
    ``rank`` positively, ``rank != 0``, ``rank > 0``, ``rank not in (-1, 0)`` negatively (the
    loose reading that pairs "the others wait first, rank 0 after" idioms)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = cond_key(test.operand)
        return (inner[0], not inner[1]) if inner else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = type(test.ops[0])
        left = ast.dump(test.left)
        if op in (ast.Eq, ast.In, ast.Is, ast.LtE, ast.Lt):
            return left, True
        return left, False
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return ast.dump(test), True
    return None
