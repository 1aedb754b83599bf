"""Taint: a value that can differ between ranks (why, where, how sure lint is of the path), and
Env, what a function knows at one point (lint/taint_eval.py evaluates expressions in it)."""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field, replace


class TaintKind(str, enum.Enum):
    """Why a value can differ between ranks, strongest first.

    RANK: the rank or a predicate on it (an error when a collective depends on it).
    SHARD: data selected by rank (``x[rank::world]``): sizes can differ between ranks.
    EXCEPTION: set in an ``except`` block: only the rank that failed runs it.
    FILESYSTEM: what a rank finds on its disk (``os.path.exists``).
    TIME: the clock.
    RANDOM: random numbers (the same only if every rank seeded alike).
    DATA: rank-local data: a loss or batch value, ``.item()``, ``isnan``.
    WORLD: the world size: the same on every rank (tracked to spot splits that ignore rank).
    PARAM: a function's own parameter, while its summary is made (what it hands back of its
        arguments); never a reason for a finding.
    """

    RANK = "rank"
    SHARD = "shard"
    EXCEPTION = "exception"
    FILESYSTEM = "filesystem"
    TIME = "time"
    RANDOM = "random"
    DATA = "data"
    WORLD = "world"
    PARAM = "param"


# what a rank finds on its disk, or an error it caught: a condition on it decides the branch
# it guards (a collective there, a jump) but does not taint what the branch assigns: a resumed
# run's start epoch read from the checkpoint it found, a fallback set in an ``except``, are
# the same on every rank of a job whose ranks see the same files and the same libraries
SETUP_KINDS = frozenset({TaintKind.FILESYSTEM, TaintKind.EXCEPTION})
MAX_VIA = 3
STRENGTH = {k: len(TaintKind) - i for i, k in enumerate(TaintKind)}
DESCRIBE = {
    TaintKind.RANK: "the rank",
    TaintKind.SHARD: "this rank's share of the data",
    TaintKind.EXCEPTION: "an exception caught on this rank",
    TaintKind.FILESYSTEM: "what this rank finds on its file system",
    TaintKind.TIME: "the clock",
    TaintKind.RANDOM: "a random draw",
    TaintKind.DATA: "rank-local data (a loss, a batch, .item())",
    TaintKind.WORLD: "the world size",
    TaintKind.PARAM: "an argument",
}


@dataclass(frozen=True)
class Taint:
    """A value that can differ between ranks: why, where it began to differ, and how sure lint
    is of the path.

    Args:
        kind: why it differs.
        line: where it began to differ.
        via: the attributes and parameters it passed through, in order.
        unseen: what it passed through that lint cannot read (an unknown call, a container it
            cannot follow), in words; empty for a definite path through operations lint knows.
        implicit: it differs because of the path that set it (an assignment under a condition),
            not by its value.
        params: while a function is summarised: which of its parameters it carries.
        state: the taint of an object as a whole, from what its class's attributes may hold:
            an attribute of it is read by its own facts, not from the whole.
    """

    kind: TaintKind
    line: int
    via: tuple[str, ...] = ()
    unseen: str = ""
    implicit: bool = False
    params: frozenset[str] = frozenset()
    state: bool = False

    def through(self, step: str) -> Taint:
        """The same taint, having passed through ``step`` (an attribute, a parameter)."""
        if step in self.via or len(self.via) >= MAX_VIA:
            return self
        return replace(self, via=(*self.via, step))

    def unseen_through(self, what: str) -> Taint:
        """The same taint, having passed through ``what``, which lint cannot read."""
        return self if self.unseen else replace(self, unseen=what)

    def as_implicit(self) -> Taint:
        return self if self.implicit else replace(self, implicit=True)

    def divergent(self) -> bool:
        """True when ranks can really take different paths on it (not the world size)."""
        return self.kind not in (TaintKind.WORLD, TaintKind.PARAM)

    def definite(self) -> bool:
        """True when the path from the source is made of operations lint knows."""
        return not self.unseen

    def is_rank(self) -> bool:
        """The rank decides, on a definite path: what makes an error."""
        return self.kind == TaintKind.RANK and not self.unseen


def share_sized(t: Taint | None) -> Taint | None:
    """What the size of a value with taint ``t`` depends on when lint did not see it built:
    values that differ by rank (data a rank chose or drew by its rank) have a size that can
    differ only as a rank's share of the data does (shares are often even, a count rounded up
    from them more often still): a definite path from the rank to a size needs a size lint
    saw computed from the rank."""
    return replace(t, kind=TaintKind.SHARD) if t is not None and t.kind == TaintKind.RANK \
        else t


def _rank_of(t: Taint) -> tuple[int, int, int]:
    return STRENGTH[t.kind], not t.unseen, not t.implicit


def stronger(a: Taint | None, b: Taint | None) -> Taint | None:
    """The stronger of two taints (None is no taint): by kind, then a definite path before
    one through what lint cannot see, then a value before a path; on a tie, the first. The
    parameters either carries are kept."""
    if a is None:
        return b
    if b is None:
        return a
    best = a if _rank_of(a) >= _rank_of(b) else b
    if b.params != a.params and (a.params or b.params):
        params = a.params | b.params
        if params != best.params:
            best = replace(best, params=params)
    return best


@dataclass
class Env:
    """What a function knows at one point: tainted names, names made uniform by a collective,
    and what objects names hold (``ddp``, ``loader``, ``evaluator``...)."""

    taints: dict[str, Taint] = field(default_factory=dict)
    uniform: set[str] = field(default_factory=set)
    kinds: dict[str, frozenset[str]] = field(default_factory=dict)
    shapes: dict[str, Taint | None] = field(default_factory=dict)  # a container's length/keys
    before_ddp: bool = False  # the scope wraps a model in DDP further on: not yet

    def copy(self) -> Env:
        return Env(dict(self.taints), set(self.uniform), dict(self.kinds), dict(self.shapes),
                   self.before_ddp)

    def shape(self, key: str) -> Taint | None:
        """The taint of a container's length and keys (its contents aside), when known."""
        return self.shapes[key] if key in self.shapes else self.taints.get(key)

    def merge(self, other: Env) -> Env:
        """The state after two paths join: taint from either, uniform only if both say so."""
        taints = dict(self.taints)
        for name, t in other.taints.items():
            taints[name] = stronger(taints.get(name), t)  # type: ignore[assignment]
        kinds = dict(self.kinds)
        for name, k in other.kinds.items():
            kinds[name] = kinds.get(name, frozenset()) | k
        shapes = dict(self.shapes)
        for name, t in other.shapes.items():
            shapes[name] = stronger(shapes.get(name), t)
        return Env(taints, self.uniform & other.uniform, kinds, shapes,
                   self.before_ddp and other.before_ddp)


def key_of(node: ast.expr) -> str | None:
    """The name a value is kept under: ``x``, ``self.x``, ``obj.x``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None
