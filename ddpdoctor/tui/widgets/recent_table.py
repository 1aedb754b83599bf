"""RecentTable: a rank's last collectives (seq, op, shapes, where, how long)."""

from __future__ import annotations

from rich.text import Text

from ddpdoctor.tui.model import Collective, RankView, ReportView
from ddpdoctor.tui.styles import format_duration
from ddpdoctor.tui.widgets.synced_table import Cell, SyncedTable

RECENT_LIMIT = 20


class RecentTable(SyncedTable):
    """The last collectives of one rank, newest first."""

    COLUMNS = (
        ("seq", "seq", 6),
        ("group", "group", 5),
        ("op", "op", 16),
        ("shapes", "shapes", 18),
        ("dtypes", "dtypes", 9),
        ("callsite", "callsite", 22),
        ("took", "took", 10),
    )

    def show(self, view: ReportView, rank: RankView, now: float) -> None:
        entries = rank.recent or view.timeline.get(rank.rank, ())
        latest = sorted(entries, key=_order, reverse=True)[:RECENT_LIMIT]
        reference = view.reference_time(now)
        self.sync([(f"{c.group}:{c.seq}:{i}", recent_cells(c, reference)) for i, c in enumerate(latest)])


def _order(entry: Collective) -> tuple[float, int]:
    return (entry.start or 0.0, entry.seq or 0)


def recent_cells(entry: Collective, reference: float) -> tuple[Cell, ...]:
    if entry.in_flight and entry.start is not None:
        took = Text(f"{format_duration(reference - entry.start)}…", style="bold yellow", justify="right")
    elif entry.start is not None and entry.end is not None:
        took = Text(f"{(entry.end - entry.start) * 1000:.0f}ms", justify="right")
    else:
        took = Text("")
    return (
        "" if entry.seq is None else str(entry.seq),
        entry.group,
        Text(entry.op, style="bold" if entry.in_flight else ""),
        entry.shapes,
        entry.dtypes,
        entry.callsite,
        took,
    )
