"""RankTable: one row a rank (state, step, current op, time in it), updated in place."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding

from ddpdoctor.tui.messages import RankSelected
from ddpdoctor.tui.model import (RankView, ReportView, dtypes_text, origin_label, shapes_text,
                                 start_of)
from ddpdoctor.tui.styles import STATE_STYLES, format_duration
from ddpdoctor.tui.rank_filter import iter_ranks
from ddpdoctor.tui.widgets.synced_table import Cell, SyncedTable

#: Seconds in one collective after which "time in op" turns yellow, then red.
SLOW_S, STUCK_S = 5.0, 30.0


class RankTable(SyncedTable):
    """The ranks side by side; Enter or a click opens a rank's stack."""

    BINDINGS = [Binding("enter", "select_cursor", "Stack")]

    COLUMNS = (
        ("rank", "rank", 6),
        ("host", "host", 14),
        ("pid", "pid", 8),
        ("state", "state", 13),
        ("step", "step", 6),
        ("epoch", "epoch", 5),
        ("seq", "seq", 6),
        ("op", "current op", 34),
        ("time", "time in op", 10),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._cells: dict[str, tuple[tuple[object, ...], tuple[Cell, ...]]] = {}

    def show(self, view: ReportView, query: str, now: float) -> None:
        """Show the ranks of `view` that match `query`; `now` is unix seconds."""
        faulty = view.faulty_ranks
        reference = view.reference_time(now)
        rows = []
        for rank in iter_ranks(view, query):
            key = str(rank.rank)
            rows.append((key, self._row(key, rank, rank.rank in faulty, reference)))
        self.sync(rows)

    def _row(self, key: str, rank: RankView, at_fault: bool, reference: float) -> tuple[Cell, ...]:
        """The cells of a rank, reused when nothing shown about it changed (cheap at 256 ranks)."""
        start = start_of(rank.current) if rank.current else None
        elapsed = format_duration(reference - start) if start is not None else ""
        signature = (rank.host, rank.pid, rank.state, rank.step, rank.epoch, rank.last_seq,
                     rank.exit_code, rank.current, elapsed, at_fault)
        cached = self._cells.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        cells = rank_cells(rank, at_fault, reference)
        self._cells[key] = (signature, cells)
        return cells

    def on_data_table_row_selected(self, event: RankTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(RankSelected(int(event.row_key.value)))

    @property
    def highlighted_rank(self) -> int | None:
        keys = self.row_keys
        if not keys or not 0 <= self.cursor_row < len(keys):
            return None
        return int(keys[self.cursor_row])


def rank_cells(rank: RankView, at_fault: bool, reference: float) -> tuple[Cell, ...]:
    """The cells of one rank's row."""
    current = rank.current
    op = Text()
    elapsed: float | None = None
    if current is not None:
        op.append(current.op, style="bold red" if at_fault else "bold")
        if origin_label(current):
            op.append(f" [{origin_label(current)}]", style="magenta")
        if current.in_shapes:
            op.append(f" {shapes_text(current)}", style="dim")
        if current.dtypes:
            op.append(f" {dtypes_text(current)}", style="dim")
        start = start_of(current)
        if start is not None:
            elapsed = max(0.0, reference - start)
    elif rank.state in ("exited", "failed", "killed") and rank.exit_code is not None:
        op.append(f"exit code {rank.exit_code}", style="dim")
    seq = current.seq if current and current.seq >= 0 else rank.last_seq
    return (
        Text(f"{'!' if at_fault else ' '}{rank.rank}", style="bold red" if at_fault else ""),
        rank.host,
        str(rank.pid) if rank.pid is not None else "",
        Text(rank.state, style=STATE_STYLES.get(rank.state, "")),
        _num(rank.step),
        _num(rank.epoch),
        _num(seq),
        op,
        Text(format_duration(elapsed), style=_time_style(elapsed), justify="right"),
    )


def _num(value: int | None) -> str:
    return "" if value is None else str(value)


def _time_style(elapsed: float | None) -> str:
    if elapsed is None or elapsed < SLOW_S:
        return ""
    return "yellow" if elapsed < STUCK_S else "bold red"
