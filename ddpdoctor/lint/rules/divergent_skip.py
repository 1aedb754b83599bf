"""A continue, break, return or raise, under a condition that differs between ranks, that skips
collectives the other ranks go on to issue."""

from __future__ import annotations

from ddpdoctor.lint.collectives import Site, flat
from ddpdoctor.lint.rules import Draft, because, considered, severity_of
from ddpdoctor.lint.taint import Taint, TaintKind

RANK_KIND = "rank_dependent_skip"
OTHER_KIND = "conditional_skip"
MESSAGE = ("`{jump}` under the condition on line {cond} skips {what} (line {line}) that the "
           "other ranks still call; the condition depends on {why}")
FIX = ("decide together: make the condition the same on every rank (all-reduce or broadcast "
       "the flag first), or issue the same collectives on this path")


def check(jump: str, line: int, taint: Taint, cond_line: int, before: list[Site],
          skipped: list[Site]) -> Draft | None:
    """Rule: a jump under a divergent condition must not skip collectives that the path
    without the jump issues, unless the jump's own branch issues the same ones first."""
    skipped = considered(skipped, taint)
    if not skipped:
        return None
    if flat(before) == flat(skipped):
        return None
    kind = RANK_KIND if taint.kind == TaintKind.RANK else OTHER_KIND
    first = skipped[0]
    return Draft(kind, severity_of(taint, first), line, first.name.split(" (")[0], cond_line,
                 MESSAGE.format(jump=jump, cond=cond_line, what=first.name, line=first.line,
                                why=because(taint)), FIX)
