"""The rank filter of the UI (`/`): rank numbers and ranges, states, hosts, ops."""

from __future__ import annotations

from typing import Iterable

from ddpdoctor.tui.model import RankView, ReportView


def matches_filter(rank: RankView, query: str) -> bool:
    """Whether a rank matches a filter: every word must match its rank (3, 0-7), state, host or op."""
    for word in query.lower().split():
        if not _word_matches(rank, word):
            return False
    return True


def _word_matches(rank: RankView, word: str) -> bool:
    if word.isdigit():
        return rank.rank == int(word)
    low, sep, high = word.partition("-")
    if sep and low.isdigit() and high.isdigit():
        return int(low) <= rank.rank <= int(high)
    if "," in word and all(p.isdigit() for p in word.split(",") if p):
        return rank.rank in {int(p) for p in word.split(",") if p}
    op = rank.current.op if rank.current else ""
    return any(word in text.lower() for text in (rank.state, rank.host, op, str(rank.pid or "")))


def iter_ranks(view: ReportView, query: str) -> Iterable[RankView]:
    """The ranks of a report that match a filter, in rank order."""
    return (r for r in view.ranks if matches_filter(r, query))
