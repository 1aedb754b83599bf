"""RankScreen: one rank in detail: state, current op, its stack and its last collectives."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from ddpdoctor.tui.model import (RankView, ReportView, dtypes_text, origin_label, shapes_text,
                                 start_of)
from ddpdoctor.tui.styles import STATE_STYLES, format_duration
from ddpdoctor.tui.widgets.recent_table import RecentTable
from ddpdoctor.tui.widgets.stack_view import StackView


class RankScreen(Screen[None]):
    """The detail of one rank; [ and ] step to the previous and next rank."""

    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back"),
        Binding("left_square_bracket", "step(-1)", "Prev rank"),
        Binding("right_square_bracket", "step(1)", "Next rank"),
    ]

    rank: reactive[int] = reactive(0)

    def __init__(self, rank: int, view: ReportView, now: float) -> None:
        super().__init__()
        self.view, self.now = view, now
        self.set_reactive(RankScreen.rank, rank)

    def compose(self) -> ComposeResult:
        yield Static(id="rank-header")
        with Vertical(id="rank-body"):
            with VerticalScroll(id="stack-box"):
                yield StackView(id="stack")
            yield RecentTable(id="recent")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#stack-box").border_title = "stack (innermost first; ▶ your innermost frame)"
        self.query_one(RecentTable).border_title = "last collectives"
        self._refresh_views()
        self.query_one("#stack-box").focus()

    def show_report(self, view: ReportView, now: float) -> None:
        self.view, self.now = view, now
        if self.is_attached and self.is_mounted:
            self._refresh_views()

    def watch_rank(self) -> None:
        if self.is_mounted:
            self._refresh_views()

    def action_step(self, delta: int) -> None:
        ranks = [r.rank for r in self.view.ranks]
        if self.rank in ranks and ranks:
            self.rank = ranks[(ranks.index(self.rank) + delta) % len(ranks)]

    def _refresh_views(self) -> None:
        rank = self.view.rank(self.rank) or RankView(rank=self.rank, state="unknown")
        self.query_one("#rank-header", Static).update(rank_header(rank, self.view, self.now))
        self.query_one(StackView).rank = rank
        self.query_one(RecentTable).show(self.view, rank, self.now)


def rank_header(rank: RankView, view: ReportView, now: float) -> Text:
    """Who the rank is and what it is doing, in a few lines."""
    text = Text()
    text.append(f" rank {rank.rank} ", style="bold reverse")
    text.append(f"  {rank.state}", style=STATE_STYLES.get(rank.state, "bold"))
    facts = [
        f"host {rank.host}" if rank.host else "",
        f"pid {rank.pid}" if rank.pid is not None else "",
        f"step {rank.step}" if rank.step is not None else "",
        f"epoch {rank.epoch}" if rank.epoch is not None else "",
        f"exit code {rank.exit_code}" if rank.exit_code is not None else "",
    ]
    text.append("  " + " · ".join(f for f in facts if f))
    current = rank.current
    if current is not None:
        text.append("\n in ")
        text.append(current.op, style="bold red" if rank.rank in view.faulty_ranks else "bold")
        text.append(f" seq {current.seq}" if current.seq >= 0 else "")
        if origin_label(current):
            text.append(f" [{origin_label(current)}]", style="magenta")
        text.append(f" [{shapes_text(current)}] {dtypes_text(current)}", style="dim")
        if current.callsite:
            text.append(f" at {current.callsite}", style="cyan")
        start = start_of(current)
        if start is not None:
            text.append(f" for {format_duration(view.reference_time(now) - start)}", style="yellow")
    profile = view.profile.get(rank.rank)
    if profile is not None:
        text.append(
            f"\n computing {profile.compute_s:.1f}s · waiting {profile.wait_s:.1f}s "
            f"({profile.wait_fraction:.0%}) · {profile.collectives or 0} collectives",
            style="dim",
        )
    for finding in view.findings:
        if rank.rank in finding.ranks:
            text.append(f"\n {finding.severity.upper()} ", style="bold red" if finding.severity == "error" else "bold yellow")
            text.append(finding.summary)
    return text
