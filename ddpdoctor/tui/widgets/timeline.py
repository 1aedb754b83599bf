"""CollectiveTimeline: seq across, ranks down, each cell the op; the divergence highlighted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ddpdoctor.tui.messages import RankSelected
from ddpdoctor.trace.record import CallRecord
from ddpdoctor.tui.model import ReportView, in_flight, origin_label
from ddpdoctor.tui.styles import abbreviate_op
from ddpdoctor.tui.rank_filter import iter_ranks

LABEL_WIDTH = 7
STYLE_HEADER = Style(bold=True, dim=True)
STYLE_LABEL = Style(bold=True)
STYLE_LABEL_FAULT = Style(bold=True, color="red")
STYLE_CURSOR = Style(reverse=True)
STYLE_MISSING = Style(dim=True)
STYLE_DONE = Style(color="cyan")
STYLE_IN_FLIGHT = Style(color="bright_white", bold=True, underline=True)
STYLE_ODD = Style(color="red", bold=True)
STYLE_FAULT = Style(color="bright_white", bgcolor="red", bold=True)
STYLE_DIVERGENT = Style(color="black", bgcolor="yellow")
STYLE_IMPLICIT = Style(italic=True)  # a collective an API issued (DDP, ZeRO, ...), not the user
STYLE_DIVERGENT_HEADER = Style(color="bright_white", bgcolor="red", bold=True)


@dataclass
class TimelineGrid:
    """The grid a timeline draws: ranks (rows), seqs (columns), the collective in each cell."""

    ranks: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    cells: dict[tuple[int, int], CallRecord] = field(default_factory=dict)
    majority: dict[int, str] = field(default_factory=dict)
    faulty: frozenset[int] = frozenset()
    divergent_seq: int | None = None
    origins: tuple[str, ...] = ()  # the APIs that issued cells the user never wrote


    @classmethod
    def build(cls, view: ReportView, group: str, query: str) -> TimelineGrid:
        ranks = [r.rank for r in iter_ranks(view, query)] if view.ranks else sorted(view.timeline)
        cells: dict[tuple[int, int], CallRecord] = {}
        ops_by_seq: dict[int, Counter[str]] = {}
        for rank in ranks:
            for entry in view.timeline.get(rank, ()):
                if entry.group != group or entry.seq < 0:
                    continue
                cells[(rank, entry.seq)] = entry
                ops_by_seq.setdefault(entry.seq, Counter())[entry.op] += 1
        divergent = view.divergent
        origins = sorted({origin_label(c) for c in cells.values()} - {""})
        return cls(
            ranks=ranks,
            seqs=sorted(ops_by_seq),
            cells=cells,
            majority={seq: counts.most_common(1)[0][0] for seq, counts in ops_by_seq.items()},
            faulty=view.faulty_ranks,
            divergent_seq=divergent.seq if divergent is not None and group == _finding_group(view) else None,
            origins=tuple(origins),
        )

    @property
    def cell_width(self) -> int:
        widest = max((len(str(s)) for s in self.seqs), default=1)
        return max(4, widest + 1)


def _finding_group(view: ReportView) -> str:
    divergent = view.divergent
    if divergent is None:
        return "0"
    group = divergent.evidence.get("group")
    return str(group) if group is not None else "0"


class CollectiveTimeline(ScrollView, can_focus=True):
    """The collectives of every rank, aligned by seq, so a mismatch shows as an odd cell."""

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("enter", "select", "Stack"),
        Binding("g", "next_group", "Next group"),
        Binding("d", "goto_divergence", "Divergence"),
    ]

    group: reactive[str] = reactive("0")
    cursor_row: reactive[int] = reactive(0)

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.grid = TimelineGrid()
        self._view: ReportView | None = None
        self._query = ""
        self._scrolled_to_divergence = False
        self._signature: tuple[object, ...] = ()

    def show(self, view: ReportView, query: str) -> None:
        """Draw the timeline of `view`'s ranks that match `query`."""
        self._view, self._query = view, query
        groups = view.groups()
        if groups and self.group not in groups:
            self.group = groups[0]
        self._rebuild()

    def _rebuild(self) -> None:
        view = self._view
        if view is None:
            return
        signature = (
            self.group,
            self._query,
            tuple((rank, id(entries)) for rank, entries in view.timeline.items()),
            tuple((r.rank, r.state, r.host) for r in view.ranks) if self._query else len(view.ranks),
            view.findings,
        )
        if signature == self._signature:
            return
        self._signature = signature
        grid = TimelineGrid.build(view, self.group, self._query)
        if grid == self.grid:
            return
        self.grid = grid
        self.border_subtitle = f"italic: issued by {', '.join(grid.origins)}" if grid.origins else ""
        self.cursor_row = min(self.cursor_row, max(0, len(grid.ranks) - 1))
        self.virtual_size = Size(LABEL_WIDTH + len(grid.seqs) * grid.cell_width, len(grid.ranks) + 1)
        self.refresh()
        self.call_after_refresh(self._first_scroll)

    def on_resize(self) -> None:
        self.call_after_refresh(self._first_scroll)

    def _first_scroll(self) -> None:
        """Bring the divergent seq into view once, as soon as the timeline has a size."""
        if self._scrolled_to_divergence or self.grid.divergent_seq is None:
            return
        if self.scrollable_content_region.width > LABEL_WIDTH:
            self._scrolled_to_divergence = True
            self.action_goto_divergence()

    def watch_group(self) -> None:
        self._rebuild()
        self.border_title = f"collectives of process group {self.group}"

    def watch_cursor_row(self) -> None:
        self.refresh()

    @property
    def selected_rank(self) -> int | None:
        ranks = self.grid.ranks
        return ranks[self.cursor_row] if 0 <= self.cursor_row < len(ranks) else None

    def action_cursor(self, delta: int) -> None:
        if not self.grid.ranks:
            return
        self.cursor_row = max(0, min(len(self.grid.ranks) - 1, self.cursor_row + delta))
        visible = self.scrollable_content_region.height - 1
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_select(self) -> None:
        if self.selected_rank is not None:
            self.post_message(RankSelected(self.selected_rank))

    def action_next_group(self) -> None:
        groups = self._view.groups() if self._view else []
        if len(groups) > 1:
            self.group = groups[(groups.index(self.group) + 1) % len(groups)] if self.group in groups else groups[0]
        else:
            self.notify("This run has only one process group.", timeout=2)

    def action_goto_divergence(self) -> None:
        """Scroll the divergent seq into view and put the cursor on the first rank at fault."""
        grid = self.grid
        seq = grid.divergent_seq
        if seq is None or seq not in grid.seqs:
            return
        column = grid.seqs.index(seq) * grid.cell_width
        cells_width = max(1, self.scrollable_content_region.width - LABEL_WIDTH)
        faulty_rows = [row for row, rank in enumerate(grid.ranks) if rank in grid.faulty]
        y = self.scroll_offset.y
        if faulty_rows:
            self.cursor_row = faulty_rows[0]
            visible = max(1, self.scrollable_content_region.height - 1)
            if not y <= self.cursor_row < y + visible:
                y = max(0, self.cursor_row - visible // 2)
        self.scroll_to(x=max(0, column - cells_width // 2), y=y, animate=False)

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1 + int(self.scroll_offset.y)
        if event.y >= 1 and 0 <= row < len(self.grid.ranks):
            self.cursor_row = row
            if event.chain >= 2 or self.has_focus:
                self.post_message(RankSelected(self.grid.ranks[row]))

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        cells_width = max(0, width - LABEL_WIDTH)
        if y == 0:
            label, cells = self._header()
        else:
            row = y - 1 + scroll_y
            if row >= len(self.grid.ranks):
                return Strip.blank(width, self.rich_style)
            label, cells = self._row(row)
        cropped = cells.crop(scroll_x, scroll_x + cells_width).extend_cell_length(cells_width)
        return Strip.join([label, cropped]).apply_style(self.rich_style)

    def _header(self) -> tuple[Strip, Strip]:
        grid = self.grid
        width = grid.cell_width
        segments = [
            Segment(f"{seq:>{width - 1}} ", STYLE_DIVERGENT_HEADER if seq == grid.divergent_seq else STYLE_HEADER)
            for seq in grid.seqs
        ]
        return Strip([Segment(f"{'seq':>{LABEL_WIDTH - 1}} ", STYLE_HEADER)]), Strip(segments)

    def _row(self, row: int) -> tuple[Strip, Strip]:
        grid = self.grid
        rank = grid.ranks[row]
        width = grid.cell_width
        at_fault = rank in grid.faulty
        label_style = STYLE_LABEL_FAULT if at_fault else STYLE_LABEL
        if row == self.cursor_row and self.has_focus:
            label_style += STYLE_CURSOR
        label = Strip([Segment(f"{'!' if at_fault else ' '}r{rank:<{LABEL_WIDTH - 3}} ", label_style)])
        segments = []
        for seq in grid.seqs:
            entry = grid.cells.get((rank, seq))
            if entry is None:
                segments.append(Segment(f"{'·':>{width - 1}} ", STYLE_MISSING))
                continue
            text = abbreviate_op(entry.op)[: width - 1]
            segments.append(Segment(f"{text:>{width - 1}}", self._cell_style(rank, seq, entry)))
            segments.append(Segment(" "))
        return label, Strip(segments)

    def _cell_style(self, rank: int, seq: int, entry: CallRecord) -> Style:
        """The cell's state (divergent, odd, in flight, done), italic when an API issued it."""
        grid = self.grid
        if seq == grid.divergent_seq:
            style = STYLE_FAULT if rank in grid.faulty else STYLE_DIVERGENT
        elif entry.op != grid.majority.get(seq):
            style = STYLE_ODD
        else:
            style = STYLE_IN_FLIGHT if in_flight(entry) else STYLE_DONE
        return style + STYLE_IMPLICIT if entry.origin.implicit else style

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
