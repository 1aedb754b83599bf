"""new_group_divergence: some ranks created a process group the others did not.

``torch.distributed.new_group`` is a collective over the default group: every rank calls
it, with the same ranks, in the same order (members or not; unless
``use_local_synchronization=True``, where its members alone do).  Groups are numbered by
the order of those calls, so one call made by some ranks only (``if rank == 0:
new_group([0])``) shifts every later group on those ranks: their next ``new_group`` is
matched with the others' earlier one, and the job waits in ``new_group`` or in the first
collective on the shifted group.  The runtime records each call (``new_group`` meta event:
its number, the ranks it names, its line); the rule here lines the ranks' calls up and
names the extra call from each rank's own sequence, not from a majority: a rank whose
next call is the call the others make at that point made one more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.model import FindingKind, Finding, JobView, Severity, ranks_text
from ddpdoctor.trace.record import short_site as _short

FIX = ("Call new_group on every rank, with the same ranks and in the same order, members of "
       "the group or not (torch requires it); keep only the use of the group under the rank "
       "test, or pass use_local_synchronization=True so that only its members call it.")


@dataclass(frozen=True)
class GroupCall:
    """One rank's new_group call: the ranks it names (None: every rank) and its line."""

    members: tuple[int, ...] | None
    site: str

    def text(self) -> str:
        named = "" if self.members is None else f"[{', '.join(map(str, self.members))}]"
        return f"new_group({named})"


def group_calls(job: JobView) -> dict[int, list[GroupCall]]:
    """rank -> its new_group calls in order (those every rank must make)."""
    out: dict[int, list[GroupCall]] = {}
    for rank, run in sorted(job.ranks.items()):
        calls = []
        for e in run.trace.meta_events("new_group"):
            if e.get("local"):
                continue
            ranks: Any = e.get("ranks")
            members = tuple(int(r) for r in ranks) if isinstance(ranks, list) else None
            calls.append(GroupCall(members, str(e.get("site") or "")))
        out[rank] = calls
    return out


def _extra_at(mine: list[GroupCall], theirs: list[GroupCall], k: int) -> bool:
    """Is ``mine[k]`` a call ``theirs`` never made: without it, ``mine`` goes on as
    ``theirs`` does from ``k`` (or ``theirs`` has no call there)?"""
    if k >= len(theirs):
        return True
    rest, other = mine[k + 1:], theirs[k:]
    n = min(len(rest), len(other))
    return n > 0 and [c.members for c in rest[:n]] == [c.members for c in other[:n]]


def new_group_divergence(job: JobView) -> Finding | None:
    """The first new_group call where the ranks differ (another group, or a call some ranks
    never made): the ranks with the extra call where their own sequences tell, else every
    rank that differs from the first rank's call."""
    calls = group_calls(job)
    if len(calls) < 2 or not any(calls.values()):
        return None
    longest = max(len(c) for c in calls.values())
    for k in range(longest):
        at = {r: c[k].members if k < len(c) else "none" for r, c in calls.items()}
        if len(set(at.values())) < 2:
            continue
        extra = tuple(r for r, c in calls.items() if k < len(c) and
                      all(_extra_at(c, calls[q], k) for q in calls
                          if at[q] != at[r]))
        culprits = extra or tuple(sorted(calls))
        others = tuple(r for r in sorted(calls) if r not in culprits)
        return _finding(calls, k, culprits, others, bool(extra))
    return None


def _finding(calls: dict[int, list[GroupCall]], k: int, culprits: tuple[int, ...],
             others: tuple[int, ...], told: bool) -> Finding:
    first = calls[culprits[0]][k] if k < len(calls[culprits[0]]) else None
    site = _short(first.site) if first is not None else ""
    what = first.text() if first is not None else "new_group"
    if told and others:
        summary = (f"{ranks_text(culprits)} called {what} at {site} that "
                   f"{ranks_text(others)} never called: every group "
                   f"{ranks_text(culprits)} created after it is shifted by one")
    else:
        summary = (f"ranks differ at their new_group call #{k}: " + "; ".join(
            f"rank {r} {c[k].text()} at {_short(c[k].site)}" if k < len(c) else
            f"rank {r} none" for r, c in sorted(calls.items())))
    lines = [f"  rank {r}: " + ", ".join(f"{c.text()} at {_short(c.site)}" for c in cs)
             for r, cs in sorted(calls.items())]
    detail = ("new_group is a collective over every rank: groups are numbered by the order "
              "of the calls, so a call some ranks make and others skip pairs each later "
              "group with a different one on the other ranks (they wait in new_group, or in "
              "the first collective on the shifted group).\nEach rank's new_group calls:\n"
              + "\n".join(lines))
    evidence = {"call": k, "site": first.site if first is not None else None,
                "calls": {str(r): [list(c.members) if c.members is not None else None
                                   for c in cs] for r, cs in sorted(calls.items())}}
    return Finding(FindingKind.COLLECTIVE_MISMATCH, Severity.ERROR, culprits, None, summary, detail,
                   FIX, evidence)
