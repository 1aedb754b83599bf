"""Which findings are one: ranks that failed alike (the same error at about the same time)
and ranks that left alike (as many steps, the same ranks left waiting)."""

from __future__ import annotations

from ddpdoctor.analysis.causal.state import Death, RankState
from ddpdoctor.analysis.align.clocks import same_host
from ddpdoctor.analysis.model import NS, Finding, FindingKind, JobView

SAME_FAILURE_NS = 5 * NS


def exited_alike(roots: list[Finding], f: Finding) -> int | None:
    """The root of ranks that ran as many steps as ``f``'s and left while the same ranks
    waited in the same call (an uneven_batches root told from a clean exit)."""
    if f.kind != FindingKind.UNEVEN_BATCHES or "steps" not in f.evidence:
        return None
    mine = f.evidence["steps"]
    for i, r in enumerate(roots):
        steps = r.evidence.get("steps")
        if r.kind != FindingKind.UNEVEN_BATCHES or not isinstance(steps, dict) or \
                r.seq != f.seq or r.evidence.get("group") != f.evidence.get("group"):
            continue
        theirs = {k: v for k, v in steps.items() if int(k) not in r.ranks}
        if steps[str(r.ranks[0])] == mine[str(f.ranks[0])] and \
                theirs == {k: v for k, v in mine.items() if int(k) not in f.ranks and
                           int(k) not in r.ranks}:
            return i
    return None


def about_the_same_time(job: JobView, a: RankState, b: RankState) -> bool:
    """Did two ranks die at about the same time?  By their stamps on one host; across
    hosts (clocks differ) when they died in the same collective."""
    if same_host(job, a.rank, b.rank):
        return abs(a.death.at_ns - b.death.at_ns) < SAME_FAILURE_NS  # type: ignore[union-attr]
    return a.call is not None and b.call is not None and \
        (a.call.group, a.call.seq) == (b.call.group, b.call.seq)


def same_failure(a: Death, b: Death) -> bool:
    """The same failure: the same words, or the same exception type at the same line (a
    ``KeyError: 2`` on rank 2 and ``KeyError: 3`` on rank 3, raised by one line)."""
    if a.cause == b.cause:
        return True
    kind_a, kind_b = a.cause.partition(":")[0], b.cause.partition(":")[0]
    return bool(a.where) and a.where == b.where and kind_a == kind_b and \
        a.signal is None and b.signal is None
