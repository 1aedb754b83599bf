"""RankTable: one row a rank (state, step, current op, time in it), updated in place."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets.data_table import ColumnKey

from ddpdoctor.tui.messages import RankSelected
from ddpdoctor.tui.model import (RankView, ReportView, dtypes_text, origin_label, shapes_text,
                                 start_of)
from ddpdoctor.tui.styles import STATE_STYLES, format_duration
from ddpdoctor.tui.rank_filter import iter_ranks
from ddpdoctor.tui.widgets.synced_table import Cell, SyncedTable

ENDED = ("exited", "failed", "killed")
#: Seconds in one collective after which "time in op" turns yellow, then red.
SLOW_S, STUCK_S = 5.0, 30.0
#: (narrowest, widest) of the current op and the user's site columns
OP_WIDTH, SITE_WIDTH = (18, 34), (14, 30)
#: the columns left of and between them: rank, state, time in op
FIXED_FIRST = 4 + 11 + 6
#: op and site before seq and the others get any width
COMFORT = (20, 16)
#: seq, step, epoch, host, pid (as in COLUMNS): shown whole or scrolled off whole
OPTIONAL_WIDTHS = (5, 5, 5, 14, 8)


def column_widths(table_width: int, padding: int, scrollbar: int = 2) -> dict[str, int]:
    """The widths of the op and site columns for a table ``table_width`` cells wide (less
    ``scrollbar``): first a comfortable width each, then seq, step, epoch, host and pid as
    many as fit whole, then the rest to op and site (within their widest; past it, to op
    when a column follows, so that no column shows cut at the right edge: those that do not
    fit scroll off whole)."""
    room = table_width - scrollbar - FIXED_FIRST - 5 * padding
    if room < sum(COMFORT):
        op = min(OP_WIDTH[1], max(OP_WIDTH[0], room // 2))
        return {"op": op, "site": min(SITE_WIDTH[1], max(SITE_WIDTH[0], room - op))}
    extra = room - sum(COMFORT)
    shown = 0
    for width in OPTIONAL_WIDTHS:
        if extra < width + padding:
            break
        extra -= width + padding
        shown += 1
    op = min(OP_WIDTH[1], COMFORT[0] + (extra + 1) // 2)
    site = min(SITE_WIDTH[1], COMFORT[1] + extra - (op - COMFORT[0]))
    op = min(OP_WIDTH[1], COMFORT[0] + extra - (site - COMFORT[1]))
    left = extra - (op - COMFORT[0]) - (site - COMFORT[1])
    if shown < len(OPTIONAL_WIDTHS):
        op += left
    return {"op": op, "site": site}


def columns_shown_whole(table: "RankTable") -> list[str]:
    """The keys of the columns that fit whole in the table's width (for tests and checks)."""
    room = table.size.width - (table.scrollbar_size_vertical
                               if table.show_vertical_scrollbar else 0)
    shown, used = [], 0
    for key, column in table.columns.items():
        used += column.get_render_width(table)
        if used > room:
            break
        shown.append(str(key.value))
    return shown


def fit_site(site: str, width: int) -> str:
    """A ``file.py:line`` in ``width`` cells: cut in the middle of the file name, never the
    line (``barrier_in_ra…point.py:60``)."""
    if len(site) <= width or width < 8:
        return site
    path, _, line = site.rpartition(":")
    tail_len = min(len(path), max(3, (width - len(line) - 2) // 2))
    head_len = width - 1 - tail_len - len(line) - 1
    if head_len < 1:
        return site[: width - 1] + "…"
    return f"{path[:head_len]}…{path[-tail_len:]}:{line}"


class RankTable(SyncedTable):
    """The ranks side by side; Enter or a click opens a rank's stack."""

    BINDINGS = [Binding("enter", "select_cursor", "Stack")]

    # The current op and the user's site come first and get the width first (column_widths);
    # the host and pid come last: at 80 columns they are what scrolls off to the right.
    COLUMNS = (
        ("rank", "rank", 4),
        ("state", "state", 11),
        ("op", "current op", OP_WIDTH[1]),
        ("time", "time", 6),
        ("site", "at", SITE_WIDTH[1]),
        ("seq", "seq", 5),
        ("step", "step", 5),
        ("epoch", "epoch", 5),
        ("host", "host", 14),
        ("pid", "pid", 8),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._cells: dict[str, tuple[tuple[object, ...], tuple[Cell, ...]]] = {}
        self._shown: tuple[ReportView, str, float] | None = None

    def on_resize(self) -> None:
        """Give the current op and the user's site the width the table has."""
        scrollbar = self.scrollbar_size_vertical if self.show_vertical_scrollbar else 0
        widths = column_widths(self.size.width, 2 * self.cell_padding, scrollbar)
        changed = False
        for key, width in widths.items():
            column = self.columns.get(ColumnKey(key))
            if column is not None and column.width != width:
                column.width = width
                changed = True
        if changed:
            self._require_update_dimensions = True
            self.refresh()
            if self._shown is not None:
                self.show(*self._shown)  # the sites again, fitted to their column

    def show(self, view: ReportView, query: str, now: float) -> None:
        """Show the ranks of `view` that match `query`; `now` is unix seconds."""
        self._shown = (view, query, now)
        faulty = view.faulty_ranks
        reference = view.reference_time(now)
        rows = []
        site_width = self._site_width()
        for rank in iter_ranks(view, query):
            key = str(rank.rank)
            rows.append((key, self._row(key, rank, rank.rank in faulty, reference, site_width)))
        self.sync(rows)

    def _site_width(self) -> int:
        column = self.columns.get(ColumnKey("site"))
        return column.width if column is not None and column.width else SITE_WIDTH[1]

    def _row(self, key: str, rank: RankView, at_fault: bool, reference: float,
             site_width: int) -> tuple[Cell, ...]:
        """The cells of a rank, reused when nothing shown about it changed (cheap at 256 ranks)."""
        start = start_of(rank.current) if rank.current else None
        elapsed = format_duration(reference - start) if start is not None else ""
        signature = (rank.host, rank.pid, rank.state, rank.step, rank.epoch, rank.last_seq,
                     rank.exit_code, rank.current, elapsed, at_fault, site_width)
        cached = self._cells.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        cells = rank_cells(rank, at_fault, reference, site_width)
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


def rank_cells(rank: RankView, at_fault: bool, reference: float,
               site_width: int = SITE_WIDTH[1]) -> tuple[Cell, ...]:
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
    site_text = fit_site(current.short_site, site_width) \
        if current is not None and current.callsite else ""
    frame = rank.user_frame if current is None and rank.state not in ENDED else None
    if frame is not None:  # outside any call: where in the user's code, and in what wait
        op.append(f"in {rank.blocked_on}" if rank.blocked_on else f"{frame.name}()",
                  style="bold red" if at_fault else "bold")
        site_text = fit_site(f"{frame.filename.rsplit('/', 1)[-1]}:{frame.line}", site_width)
    site = Text(site_text, style="bold cyan" if at_fault else "cyan")
    return (
        Text(f"{'!' if at_fault else ' '}{rank.rank}", style="bold red" if at_fault else ""),
        Text(rank.state, style=STATE_STYLES.get(rank.state, "")),
        op,
        Text(format_duration(elapsed), style=_time_style(elapsed), justify="right"),
        site,
        _num(seq),
        _num(rank.step),
        _num(rank.epoch),
        rank.host,
        str(rank.pid) if rank.pid is not None else "",
    )


def _num(value: int | None) -> str:
    return "" if value is None else str(value)


def _time_style(elapsed: float | None) -> str:
    if elapsed is None or elapsed < SLOW_S:
        return ""
    return "yellow" if elapsed < STUCK_S else "bold red"
