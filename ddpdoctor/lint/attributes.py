"""Rank-dependence that flows through objects: attributes and the arguments of calls.

A value that differs between ranks can leave a function in two ways besides its return value:

- into an object's attribute (``self.enabled = is_chief``, ``monitor.enabled = rank == 0``):
  every method of the object's class then starts with that attribute tainted, and so does
  every name bound to a new object of that class;
- into a parameter of a linted function (``GradNormMonitor(is_chief=(rank == 0))``,
  ``step(is_main)``): the callee starts with that parameter tainted.

The facts are kept on the program (a class attribute's taint, a parameter's taint), joined over
every assignment and call site, and grow only; the summary pass repeats until they stop growing.
A uniform value (the world size, a constant) adds no fact, so ``self.world_size =
dist.get_world_size()`` or ``self.distributed = world_size > 1`` taints nothing. Object state
carries the rank and the rank's shard only: state restored from a checkpoint a rank finds on
disk, or set in an ``except``, is the same on every rank of a healthy job as a rule (the
same shared checkpoint), and flow-insensitive facts about it would cry wolf.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.taint import Taint, TaintKind, stronger


CLASS_LABEL = "class:"
CARRIED = frozenset({TaintKind.RANK, TaintKind.SHARD})


def carried(t: Taint | None) -> Taint | None:
    """The taint an object's state or a parameter keeps across functions: the rank's alone, on
    a definite path (what came through a call lint cannot read stays where it was)."""
    if t is None or t.kind not in CARRIED or t.unseen:
        return None
    return replace(t, params=frozenset()) if t.params else t


@dataclass
class ObjectFacts:
    """What flows into objects and parameters, file-wide: grows only (a fixpoint's state)."""

    attrs: dict[tuple[str, str], dict[str, Taint]] = field(default_factory=dict)
    params: dict[int, dict[str, Taint]] = field(default_factory=dict)  # id(function node)
    version: int = 0  # bumped whenever a fact grows
    dirty: set[tuple[str, ...] | int] = field(default_factory=set)  # grown since taken

    def take_dirty(self) -> set[tuple[str, ...] | int]:
        """The facts grown since the last call: id(function node) for a parameter's,
        (path, class) for an attribute's."""
        found, self.dirty = self.dirty, set()
        return found

    def class_attrs(self, path: str, cls: str) -> dict[str, Taint]:
        """The tainted attributes of a class of a file: attribute name -> taint."""
        return self.attrs.get((path, cls), {})

    def add_attr(self, path: str, cls: str, attr: str, t: Taint | None) -> None:
        """``attr`` of objects of ``cls`` may hold a value tainted by ``t``."""
        t = carried(t)
        if t is None:
            return
        table = self.attrs.setdefault((path, cls), {})
        if self._grow(table, attr, t.through(f"`{cls}.{attr}`")):
            self.dirty.add((path, cls))

    def add_param(self, node: ast.AST, name: str, t: Taint | None, shown: str) -> None:
        """Parameter ``name`` of the function ``node`` may receive a value tainted by ``t``."""
        t = carried(t)
        if t is None:
            return
        if self._grow(self.params.setdefault(id(node), {}), name, t.through(shown)):
            self.dirty.add(id(node))

    def param_taints(self, node: ast.AST) -> dict[str, Taint]:
        return self.params.get(id(node), {})

    def _grow(self, table: dict[str, Taint], key: str, t: Taint) -> bool:
        old = table.get(key)
        new = stronger(old, t)
        if new is not old:
            table[key] = new  # type: ignore[assignment]
            self.version += 1
            return True
        return False


def class_of(labels: frozenset[str]) -> str | None:
    """The file's class an object is an instance of, from what its name holds."""
    return next((lb[len(CLASS_LABEL):] for lb in labels if lb.startswith(CLASS_LABEL)), None)


def constructed(call: ast.Call, module: ParsedModule) -> ast.ClassDef | None:
    """The file's class a call builds (``GradNormMonitor(...)``), if any."""
    name = module.qualified(call.func) or ""
    return module.classes().get(name)


def class_fields(cls: ast.ClassDef) -> list[str]:
    """A dataclass's fields in order (annotated names of its body)."""
    return [s.target.id for s in cls.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


