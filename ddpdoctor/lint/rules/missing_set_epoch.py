"""A DistributedSampler that shuffles, read in an epoch loop that never calls set_epoch."""

from __future__ import annotations

import ast

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.module import ParsedModule, own
from ddpdoctor.lint.rules import Draft

KIND = "missing_set_epoch"
MESSAGE = ("the epoch loop on line {line} reads {loader} (a shuffling DistributedSampler, line "
           "{sampler}) but never calls set_epoch: every epoch repeats the first epoch's order")
FIX = "call sampler.set_epoch(epoch) at the start of each epoch"


def _is_sampler(call: ast.AST, module: ParsedModule) -> bool:
    if not isinstance(call, ast.Call):
        return False
    name = module.qualified(call.func) or ""
    if not name.endswith("DistributedSampler"):
        return False
    for k in call.keywords:
        if k.arg == "shuffle" and isinstance(k.value, ast.Constant) and not k.value.value:
            return False
    return True


def _local_nodes(func: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body (nested functions and classes left out)."""
    return own(func)


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _loaders(nodes: list[ast.AST], module: ParsedModule) -> dict[str, int]:
    """Loader names (and the sampler's line) built on a shuffling DistributedSampler."""
    samplers = {t.id: n.lineno for n in nodes if isinstance(n, ast.Assign)
                and _is_sampler(n.value, module) for t in n.targets if isinstance(t, ast.Name)}
    loaders: dict[str, int] = {}
    for n in nodes:
        if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)):
            continue
        for k in n.value.keywords:
            line = None
            if k.arg == "sampler" and isinstance(k.value, ast.Name) and k.value.id in samplers:
                line = samplers[k.value.id]
            elif k.arg == "sampler" and _is_sampler(k.value, module):
                line = k.value.lineno
            if line is not None:
                loaders.update({t.id: line for t in n.targets if isinstance(t, ast.Name)})
    return loaders


def check(func: ast.AST, module: ParsedModule, set_epoch_functions: set[str]) -> list[Draft]:
    """Rule: a loop that contains a loop over a loader whose DistributedSampler shuffles must
    call ``set_epoch`` (itself, or through a function of the file that does)."""
    nodes = _local_nodes(func)
    loaders = _loaders(nodes, module)
    drafts: list[Draft] = []
    if not loaders:
        return drafts
    for outer in nodes:
        if not isinstance(outer, (ast.For, ast.While)):
            continue
        inner = [n for n in ast.walk(outer) if isinstance(n, ast.For) and n is not outer
                 and _names_in(n.iter) & loaders.keys()]
        if not inner:
            continue
        called = {ast.unparse(c.func).rsplit(".", 1)[-1] for c in ast.walk(outer)
                  if isinstance(c, ast.Call)}
        if "set_epoch" in called or called & set_epoch_functions:
            continue
        if any(o is not outer and isinstance(o, (ast.For, ast.While)) and outer in ast.walk(o)
               for o in nodes):
            continue  # an inner epoch loop: the outermost one is reported
        loader = sorted(_names_in(inner[0].iter) & loaders.keys())[0]
        drafts.append(Draft(KIND, Severity.WARNING, outer.lineno, "DistributedSampler.set_epoch",
                            None, MESSAGE.format(line=outer.lineno, loader=loader,
                                                 sampler=loaders[loader]), FIX))
    return drafts
