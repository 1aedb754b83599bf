"""A loop whose number of iterations differs between ranks, around a collective."""

from __future__ import annotations

from ddpdoctor.lint.collectives import Site
from ddpdoctor.lint.rules import Draft, because, considered, severity_of
from ddpdoctor.lint.taint import Taint, TaintKind

RANK_KIND = "rank_dependent_loop"
OTHER_KIND = "uneven_loop"
MESSAGE = ("the loop on line {cond} runs a number of times (or in an order) that depends on "
           "{why}; {what} in its body then runs more often on some ranks than on others")
FIX = ("give every rank the same number of iterations (DistributedSampler with drop_last, or "
       "all-reduce the count with MIN first), or run the loop inside `with Join([model]):`")


def check(taint: Taint, cond_line: int, body: list[Site]) -> Draft | None:
    """Rule: a loop bounded by a value that differs between ranks must not issue collectives
    (outside ``Join``): the ranks would run them a different number of times."""
    sites = considered(body, taint)
    if not sites:
        return None
    site = sites[0]
    kind = RANK_KIND if taint.kind == TaintKind.RANK else OTHER_KIND
    return Draft(kind, severity_of(taint, site), site.line, site.name.split(" (")[0], cond_line,
                 MESSAGE.format(cond=cond_line, why=because(taint), what=site.name), FIX)
