"""A collective that only the ranks taking one side of a condition reach."""

from __future__ import annotations

from ddpdoctor.lint.collectives import Site, flat
from ddpdoctor.lint.rules import Draft, because, considered, severity_of
from ddpdoctor.lint.taint import Taint, TaintKind

RANK_KIND = "rank_dependent_collective"
OTHER_KIND = "conditional_collective"
ORDER_KIND = "rank_dependent_order"
MESSAGE = "{what} runs only where the condition on line {cond} holds, which depends on {why}"
ORDER_MESSAGE = ("the branches of line {cond} issue collectives in different orders ({what} "
                 "first on one side, {other} on the other): a deadlock when ranks take both")
FIX = ("call {what} on every rank (outside the condition) and keep only the rank-specific "
       "work inside it")
ORDER_FIX = "issue the collectives in one order on every rank, outside the condition"


def signature(sites: list[Site]) -> list[str]:
    """The sites that must match across ranks (point-to-point ops differ by design)."""
    return [s.sig for s in sites if not s.p2p]


def _per_group(a: list[Site], b: list[Site]) -> bool:
    """Both branches issue the same ops in the same order, each side every one on an
    explicit group of its own (``if rank < 2: all_reduce(x, group=g01) else:
    all_reduce(x, group=g23)``): each group's members are the ranks that take its side, a
    balanced split, as under a membership test."""
    return bool(a) and len(a) == len(b) and all(x.grouped and y.grouped for x, y in zip(a, b)) \
        and [x.name for x in a] == [y.name for y in b] \
        and not {x.sig for x in a} & {y.sig for y in b}  # no group called on both sides


def check(taint: Taint, cond_line: int, taken: list[Site], other: list[Site],
          membership: bool = False) -> Draft | None:
    """Rule: when a condition that can differ between ranks guards a branch, the collectives
    of both branches must be the same ops in the same order (p2p ops aside); else the first
    collective that differs is flagged (an error when the rank decides, else a warning).
    Under a membership test (``if rank in members:``), collectives on an explicit group are
    taken to be that group's, which only its members call."""
    a = [s for s in considered(taken, taint) if not (membership and s.grouped)]
    b = [s for s in considered(other, taint) if not (membership and s.grouped)]
    if flat(a) == flat(b) or _per_group(a, b):
        return None
    if a and b and sorted(s.sig for s in a) == sorted(s.sig for s in b):
        first = next(x for x, y in zip(a, b) if x.sig != y.sig)
        second = next(y for x, y in zip(a, b) if x.sig != y.sig)
        return Draft(ORDER_KIND, severity_of(taint, first), first.line, first.name.split(" (")[0],
                     cond_line, ORDER_MESSAGE.format(cond=cond_line, what=first.sig,
                                                     other=second.sig), ORDER_FIX)
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x.sig != y.sig), min(len(a), len(b)))
    site = a[index] if index < len(a) else b[index]
    kind = RANK_KIND if taint.kind == TaintKind.RANK else OTHER_KIND
    short = site.name.split(" (")[0]
    return Draft(kind, severity_of(taint, site), site.line, short, cond_line,
                 MESSAGE.format(what=site.name, cond=cond_line, why=because(taint)),
                 FIX.format(what=short))
