"""One module under two reentrant activation checkpoints in one forward, inside DDP: the second
checkpoint's nested backward marks its parameters ready twice; DDP raises, or its replicas drift."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.framework_wraps import Wrapper, wrap_roots
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft

KIND = "reentrant_checkpoint"
CHECKPOINT = "torch.utils.checkpoint.checkpoint"
# torch 2.13, gloo: with a parameter of the model before the first checkpoint DDP raises; with
# none (the checkpoint takes the batch itself) it raises nothing, and the second pass's gradients
# reach the parameters unaveraged (not the ranks' mean)
# (tests/integration/test_reentrant_checkpoint_ddp.py)
MESSAGE = ("{what} is checkpointed with use_reentrant={how} {again}: under DDP{where} its "
           "parameters are marked ready twice in one backward; DDP raises \"Expected to mark "
           "a variable ready only once\" or, where no parameter comes before the first "
           "checkpoint, raises nothing and leaves their gradients unaveraged, so the replicas "
           "silently drift apart")
FIX = "checkpoint(..., use_reentrant=False), or {static} if the graph is the same every iteration"
MAYBE = (" (if this module is what the job wraps: the DDP wrap's module is not resolved "
         "in the files linted)")


@dataclass(frozen=True)
class Checkpointed:
    """A reentrant checkpoint call of one callable, and how often one forward reaches it."""

    call: ast.Call
    callable_text: str
    times: int  # 1, or 2 for twice or more (a second call, a loop)
    loop_line: int | None  # the loop header that repeats it, if a loop does


@dataclass(frozen=True)
class Wraps:
    """The linted files' DDP wraps: the classes they wrap (with what they hold) and the wrapper of
    each, and whether a wrap's module could not be resolved."""

    classes: Mapping[str, Wrapper]
    unresolved: bool


def reentrant(call: ast.Call, module: ParsedModule) -> bool:
    """True for ``torch.utils.checkpoint.checkpoint(...)`` with ``use_reentrant=True`` or no
    ``use_reentrant`` (torch's default is reentrant, with a warning); False when the argument is
    False or not a constant (unknown: no finding)."""
    if module.qualified(call.func) != CHECKPOINT:
        return False
    for k in call.keywords:
        if k.arg is None:  # **kwargs: could hold use_reentrant
            return False
        if k.arg == "use_reentrant":
            return isinstance(k.value, ast.Constant) and k.value.value is True
    return True


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _assigned(loop: ast.For | ast.While) -> set[str]:
    """Names a loop binds: its target and what its body assigns."""
    out = _names(loop.target) if isinstance(loop, ast.For) else set()
    for stmt in loop.body:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
                for t in getattr(n, "targets", []) + [getattr(n, "target", None)]:
                    if t is not None:
                        out |= _names(t)
    return out


def _once(loop: ast.For | ast.While) -> bool:
    """True when the loop's body runs at most once: ``range(1)``, ``range(0)``, one literal item."""
    if isinstance(loop, ast.While):
        return False
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
            and len(it.args) == 1 and isinstance(it.args[0], ast.Constant):
        return isinstance(it.args[0].value, int) and it.args[0].value <= 1
    return isinstance(it, (ast.List, ast.Tuple)) and len(it.elts) <= 1


def _count(stmts: list[ast.stmt], module: ParsedModule,
           loops: list[ast.For | ast.While]) -> dict[str, list[Checkpointed]]:
    """The reentrant checkpoint calls of ``stmts`` by callable, on the path that reaches most of
    them (of an ``if``'s two branches only one runs)."""
    found: dict[str, list[Checkpointed]] = {}
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.If):
            a = _count(stmt.body, module, loops)
            b = _count(stmt.orelse, module, loops)
            leaves = _leaves(stmt.body), _leaves(stmt.orelse)
            if any(leaves):  # a branch that returns never reaches the statements after it
                rest = _count(stmts[i + 1:], module, loops)
                a = a if leaves[0] else _then(a, rest)
                b = b if leaves[1] else _then(b, rest)
            for key in a.keys() | b.keys():
                found.setdefault(key, []).extend(max(a.get(key, []), b.get(key, []), key=len))
            if any(leaves):
                return found
            continue
        if isinstance(stmt, (ast.For, ast.While)):
            inner = _count(stmt.body, module, loops + [stmt])
            for key, calls in inner.items():
                found.setdefault(key, []).extend(calls)
            continue
        if isinstance(stmt, (ast.With, ast.Try)):
            bodies = [stmt.body] + ([h.body for h in stmt.handlers] + [stmt.orelse, stmt.finalbody]
                                    if isinstance(stmt, ast.Try) else [])
            for body in bodies:
                for key, calls in _count(body, module, loops).items():
                    found.setdefault(key, []).extend(calls)
            continue
        calls = sorted((n for n in ast.walk(stmt) if isinstance(n, ast.Call)
                        and reentrant(n, module) and n.args),
                       key=lambda c: (c.lineno, c.col_offset))
        repeated = _in_comprehensions(stmt)
        for call in calls:
            fn = call.args[0]
            repeat = next((lp.lineno for lp in loops
                           if not _once(lp) and not _names(fn) & _assigned(lp)), None)
            if repeat is None and id(call) in repeated and not _names(fn) & repeated[id(call)]:
                repeat = call.lineno  # a comprehension repeats it with the same callable
            text = ast.unparse(fn)
            found.setdefault(text, []).append(Checkpointed(
                call, text, 2 if repeat is not None else 1, repeat))
    return found


def _leaves(block: list[ast.stmt]) -> bool:
    """True when a block ends by leaving: ``return``, ``raise``, ``break``, ``continue``."""
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise, ast.Break,
                                                  ast.Continue))


def _then(first: dict[str, list[Checkpointed]],
          then: dict[str, list[Checkpointed]]) -> dict[str, list[Checkpointed]]:
    """The calls of one path, then those of the path after it."""
    return {key: first.get(key, []) + then.get(key, []) for key in first.keys() | then.keys()}


def _in_comprehensions(stmt: ast.stmt) -> dict[int, set[str]]:
    """The calls inside a comprehension's element, with the names its loops bind."""
    out: dict[int, set[str]] = {}
    for comp in ast.walk(stmt):
        if isinstance(comp, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            bound = set().union(*(_names(g.target) for g in comp.generators))
            elts = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
            for node in (n for e in elts for n in ast.walk(e)):
                if isinstance(node, ast.Call):
                    out[id(node)] = out.get(id(node), set()) | bound
    return out


def ddp_wraps(modules: list[ParsedModule]) -> Wraps:
    """The classes the files' DDP wraps (without static_graph) hold, their submodules' classes
    included: DDP(...) and ignite's auto_model, a Lightning Trainer with a DDP strategy's fit,
    accelerate's prepare."""
    defined = {name: cls for m in modules for name, cls in m.classes().items()}
    found = [wrap_roots(module, set(defined)) for module in modules]
    held: dict[str, Wrapper] = {}
    for name, wrapper in sorted(root for f in found for root in f.classes):
        held.setdefault(name, wrapper)
    todo = list(held)
    while todo:
        name = todo.pop()
        for n in ast.walk(defined[name]):
            if isinstance(n, ast.Name) and n.id in defined and n.id not in held:
                held[n.id] = held[name]
                todo.append(n.id)
    return Wraps(held, any(f.unresolved for f in found))


def check(module: ParsedModule, wraps: Wraps) -> list[Draft]:
    """Rule: under DDP (without static_graph), no module may be checkpointed reentrantly more
    than once per forward (two calls in one method, or one call in a loop): a reentrant
    checkpoint's nested backward marks its parameters ready again."""
    drafts: list[Draft] = []
    for cls in module.classes().values():
        wrapper = wraps.classes.get(cls.name)
        if wrapper is None and not wraps.unresolved:
            continue
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for text, calls in _count(method.body, module, []).items():
                drafts += _drafts(text, calls, wrapper)
    return drafts


def _drafts(text: str, calls: list[Checkpointed], wrapper: Wrapper | None) -> list[Draft]:
    """A draft at the second call of one callable (or at a call a loop repeats): an error when
    the class is known to be under DDP (``wrapper``), else a warning."""
    if sum(c.times for c in calls) < 2:
        return []
    first = calls[0]
    culprit = first if first.times > 1 else calls[1]
    how = next((ast.unparse(k.value) for k in culprit.call.keywords
                if k.arg == "use_reentrant"), None)
    again = (f"in the loop of line {culprit.loop_line}" if culprit is first
             else f"again (first on line {first.call.lineno})")
    message = MESSAGE.format(what=text, how=how or "True (torch's default)", again=again,
                             where="" if wrapper is not None else MAYBE)
    severity = Severity.ERROR if wrapper is not None else Severity.WARNING
    fix = FIX.format(static=(wrapper or Wrapper.DDP).value)
    return [Draft(KIND, severity, culprit.call.lineno, "DDP backward", None, message, fix)]
