"""Where a file's code can make a value differ between ranks, found by what lint knows (the
calls, attributes, environment reads and handlers the taint evaluation starts a taint at),
never by words of the source: the facts engine.py's pre-filters decide by, so that a function
whose walk cannot change a finding is not walked.

Per file, once: each node that starts a taint (lint/taint_eval.py's sources), with what it can
start (``RANK``, ``WORLD``, ``LOCAL``: data, files, time, chance, errors; ``SEEDS``: a seed or
a DataLoader, for the seed rules), and the top level's names that hold such a value (a global
``rank = dist.get_rank()`` read in a function); a function's sources are a slice of them."""

from __future__ import annotations

import ast
from bisect import bisect_left

from ddpdoctor.frameworks import lightning
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules.seed_collision import seed_families
from ddpdoctor.lint.summaries import rank_decorator
from ddpdoctor.lint.taint_eval import (DATA_CALLS, DATA_METHODS, FS_CALLS, FS_METHODS,
                                       LISTING_CALLS, LISTING_METHODS, RANDOM_PREFIXES, RANK_ATTRS,
                                       RANK_CALLS, RANK_ENV_VARS, RANK_METHODS, TIME_CALLS,
                                       TORCH_RANDOM, WORLD_ATTRS, WORLD_CALLS, WORLD_METHODS,
                                       env_var_name)
from ddpdoctor.lint.known_calls import LOAD_CALLS

RANK, WORLD, LOCAL, SEEDS, GLOBAL = 1, 2, 4, 8, 16  # GLOBAL: reads a top-level name that holds one
ANY = RANK | WORLD | LOCAL | GLOBAL
LOCAL_CALLS = FS_CALLS | LISTING_CALLS | TIME_CALLS | DATA_CALLS | TORCH_RANDOM | LOAD_CALLS
LOCAL_METHODS = FS_METHODS | LISTING_METHODS | DATA_METHODS
ITERATION_ENDS = frozenset({"next", "anext"})  # StopIteration: this rank's iterator ended
LOADERS = ("DataLoader", "auto_dataloader")


def call_source(call: ast.Call, module: ParsedModule) -> int:
    """What a call can start: the rank, the world size, a rank-local value, a seed."""
    name = module.qualified(call.func) or ""
    attr = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    found = 0
    var = env_var_name(call, module)
    if var is not None:
        found |= RANK if var in RANK_ENV_VARS else LOCAL
    if name in RANK_CALLS or attr in RANK_METHODS or name.endswith("init_process_group") or \
            any(k.arg == lightning.RANK_ZERO_KEYWORD for k in call.keywords):
        found |= RANK  # init_process_group(rank=r): told the rank; log(rank_zero_only=True)
    if name in WORLD_CALLS or attr in WORLD_METHODS:
        found |= WORLD
    if name in LOCAL_CALLS or attr in LOCAL_METHODS or name.startswith(RANDOM_PREFIXES) or \
            name in ITERATION_ENDS:
        found |= LOCAL
    if seed_families(call, module) is not None or name.endswith(LOADERS):
        found |= SEEDS | LOCAL  # a loader's batches are this rank's
    return found


LOCAL_NODES = (ast.ExceptHandler, ast.Yield, ast.YieldFrom, ast.Await)


def node_source(node: ast.AST, module: ParsedModule) -> int:
    kind = type(node)
    if kind is ast.Call:
        return call_source(node, module)  # type: ignore[arg-type]
    if kind is ast.Attribute:
        attr = node.attr  # type: ignore[attr-defined]
        return RANK if attr in RANK_ATTRS else WORLD if attr in WORLD_ATTRS else 0
    if kind is ast.Subscript:
        var = env_var_name(node, module)  # type: ignore[arg-type]
        return 0 if var is None else RANK if var in RANK_ENV_VARS else LOCAL
    if kind in LOCAL_NODES:
        return LOCAL
    if kind in (ast.FunctionDef, ast.AsyncFunctionDef) and node.decorator_list and \
            rank_decorator(node):  # type: ignore[arg-type,attr-defined]
        return RANK  # @rank_zero_only: its body runs on some ranks only
    return 0


def _table(module: ParsedModule) -> tuple[list[int], list[int], dict[str, int]]:
    """The file's source nodes (their pre-order indices and what they start) and the top
    level's names that hold a value some source started, once per file."""
    cached = module.__dict__.get("_sources")
    if cached is not None:
        return cached
    where: list[int] = []
    what: list[int] = []
    for i, node in enumerate(module.nodes()):
        found = node_source(node, module)
        if found:
            where.append(i)
            what.append(found)
    held = _globals(module)
    if held:  # a function that reads a global holding a source's value
        for i, node in enumerate(module.nodes()):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in held:
                where.append(i)
                what.append(GLOBAL | held[node.id])
        order = sorted(range(len(where)), key=where.__getitem__)
        where, what = [where[k] for k in order], [what[k] for k in order]
    module.__dict__["_sources"] = cached = (where, what, held)
    return cached


def _globals(module: ParsedModule) -> dict[str, int]:
    """The top level's names assigned a value a source started, directly or through another
    such name, or from a call of the file's own functions (what they return is not known yet)."""
    own = {n.name for n in module.tree.body if isinstance(n, (ast.FunctionDef,
                                                                  ast.AsyncFunctionDef))}
    held: dict[str, int] = {}
    statements = [n for n in module.own_nodes(module.tree)
                  if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    for stmt in statements + statements:  # twice: a name assigned from one assigned later
        if stmt.value is None:
            continue
        found = 0
        for n in [stmt.value, *ast.walk(stmt.value)]:
            found |= node_source(n, module) & ANY
            if isinstance(n, ast.Name) and n.id in held:
                found |= held[n.id]
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in own:
                found |= ANY
        if not found:
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    held[n.id] = held.get(n.id, 0) | found
    return held


def sources(module: ParsedModule, scope: ast.AST) -> int:
    """What the code of ``scope`` (a function, with what is defined inside it) can start."""
    where, what, _ = _table(module)
    span = module.span(scope)
    lo, hi = (0, len(where)) if span is None else \
        (bisect_left(where, span[0]), bisect_left(where, span[1]))
    found = 0
    for k in range(lo, hi):
        found |= what[k]
    return found
