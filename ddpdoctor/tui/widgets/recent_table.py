"""RecentTable: a rank's last collectives (seq, op, shapes, where, how long)."""

from __future__ import annotations

from rich.text import Text

from ddpdoctor.trace.record import CallRecord
from ddpdoctor.tui.model import (RankView, ReportView, dtypes_text, end_of, in_flight,
                                 origin_label, seq_of, shapes_text, start_of)
from ddpdoctor.tui.styles import format_duration
from ddpdoctor.tui.widgets.rank_table import fit_site
from ddpdoctor.tui.widgets.synced_table import Cell, SyncedTable

RECENT_LIMIT = 20
SITE_WIDTH = 24  # a longer file:line is cut in its name, never its line (fit_site)


class RecentTable(SyncedTable):
    """The last collectives of one rank, newest first."""

    # the op and the user's line first (as in the rank table): at 80 columns the shapes,
    # dtypes and group are what scroll off to the right
    COLUMNS = (
        ("seq", "seq", 5),
        ("op", "op", 24),
        ("callsite", "at", SITE_WIDTH),
        ("took", "took", 8),
        ("shapes", "shapes", 18),
        ("dtypes", "dtypes", 9),
        ("group", "group", 5),
    )

    def show(self, view: ReportView, rank: RankView, now: float) -> None:
        entries = rank.recent or view.timeline.get(rank.rank, ())
        latest = sorted(entries, key=_order, reverse=True)[:RECENT_LIMIT]
        reference = view.reference_time(now)
        self.sync([(f"{c.group}:{c.seq}:{i}", recent_cells(c, reference)) for i, c in enumerate(latest)])


def _order(entry: CallRecord) -> tuple[float, int]:
    return (start_of(entry) or 0.0, seq_of(entry) or 0)


def recent_cells(entry: CallRecord, reference: float) -> tuple[Cell, ...]:
    start, end, running = start_of(entry), end_of(entry), in_flight(entry)
    if running and start is not None:
        took = Text(f"{format_duration(reference - start)}…", style="bold yellow", justify="right")
    elif start is not None and end is not None:
        took = Text(f"{(end - start) * 1000:.0f}ms", justify="right")
    else:
        took = Text("")
    op = Text(entry.op, style="bold" if running else "")
    if origin_label(entry):
        op.append(f" [{origin_label(entry)}]", style="magenta")
    seq = seq_of(entry)
    return (
        "" if seq is None else str(seq),
        op,
        Text(fit_site(entry.short_site, SITE_WIDTH) if entry.callsite else "", style="cyan"),
        took,
        shapes_text(entry),
        dtypes_text(entry),
        entry.group,
    )
