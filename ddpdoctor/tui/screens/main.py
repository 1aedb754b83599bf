"""MainScreen: the run summary and the tabs: ranks, timeline, findings, profile, log, waits."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from ddpdoctor.tui.model import ReportView
from ddpdoctor.tui.rank_filter import iter_ranks
from ddpdoctor.tui.widgets.findings_list import FindingsList
from ddpdoctor.tui.widgets.log_pane import LogPane
from ddpdoctor.tui.widgets.profile_table import ProfileTable
from ddpdoctor.tui.widgets.rank_table import RankTable
from ddpdoctor.tui.widgets.run_summary import RunSummary
from ddpdoctor.tui.widgets.timeline import CollectiveTimeline
from ddpdoctor.tui.widgets.wait_graph import WaitGraph

TABS = ("ranks", "timeline", "findings", "profile", "log", "waits")


class MainScreen(Screen[None]):
    """Everything about the run on one screen, a tab per view."""

    BINDINGS = [
        Binding("r", "show_tab('ranks')", "Ranks"),
        Binding("t", "show_tab('timeline')", "Timeline"),
        Binding("f", "show_tab('findings')", "Findings"),
        Binding("p", "show_tab('profile')", "Profile"),
        Binding("l", "show_tab('log')", "Log"),
        Binding("w", "show_tab('waits')", "Waits", show=False),  # a tab only when there are waits
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    rank_filter: reactive[str] = reactive("")

    def __init__(self, command: tuple[str, ...] = (), job_log: Path | None = None) -> None:
        super().__init__()
        self.command = command
        self.job_log = job_log
        self.view: ReportView | None = None
        self.now = 0.0
        self.waiting_message = ""
        self._ready = False
        self._waits_shown = False

    def compose(self) -> ComposeResult:
        yield RunSummary(self.command, id="summary")
        with TabbedContent(id="tabs", initial="ranks"):
            with TabPane("Ranks", id="ranks"):
                yield RankTable(id="rank-table")
            with TabPane("Timeline", id="timeline"):
                yield CollectiveTimeline(id="timeline-view")
                yield Static(timeline_legend(), id="timeline-legend")
            with TabPane("Findings", id="findings"):
                yield FindingsList(id="findings-list")
            with TabPane("Profile", id="profile"):
                yield Static("No time profile was recorded for this run.", id="profile-empty")
                yield ProfileTable(id="profile-table")
            with TabPane("Log", id="log"):
                yield LogPane(self.job_log, id="log-pane")
            with TabPane("Waits", id="waits"):
                yield WaitGraph(id="wait-graph")
        with Vertical(id="filter-bar"):
            yield Input(placeholder="filter ranks: 3  0-7  1,5  hung  broadcast  gpu-node-02", id="filter")
        yield Footer(show_command_palette=False, compact=True)  # whole at 80 columns

    def on_unmount(self) -> None:
        self._ready = False

    def on_mount(self) -> None:
        self.query_one("#filter-bar").display = False
        self.query_one(TabbedContent).hide_tab("waits")
        self._waits_shown = False
        self.query_one(RankTable).focus()
        self._ready = True
        self._refresh_views()

    def show_report(self, view: ReportView, now: float) -> None:
        """Show a (new) report in every view; cheap when little changed."""
        self.view, self.now = view, now
        if self.is_attached and self._ready:
            self._refresh_views()

    def show_waiting(self, message: str) -> None:
        self.waiting_message = message
        if self._ready:
            self.query_one(RunSummary).waiting_message = message

    def _refresh_views(self) -> None:
        """Update the summary, the tab labels and the visible tab; hidden tabs update when shown."""
        view = self.view
        if not self._ready:
            return
        summary = self.query_one(RunSummary)
        summary.waiting_message = self.waiting_message
        if view is None:
            return
        summary.now = self.now
        summary.view = view
        tabs = self.query_one(TabbedContent)
        self._refresh_tab(tabs.active or "ranks")
        self._label_tabs(view, tabs)

    def _refresh_tab(self, tab: str) -> None:
        view, query = self.view, self.rank_filter
        if view is None:
            return
        if tab == "ranks":
            self.query_one(RankTable).show(view, query, self.now)
        elif tab == "timeline":
            self.query_one(CollectiveTimeline).show(view, query)
        elif tab == "findings":
            self.query_one(FindingsList).show(view)
        elif tab == "profile":
            has_profile = bool(view.profile)
            self.query_one("#profile-empty").display = not has_profile
            self.query_one(ProfileTable).display = has_profile
            self.query_one(ProfileTable).show(view, query)
        elif tab == "waits":
            self.query_one(WaitGraph).show(view)

    def _label_tabs(self, view: ReportView, tabs: TabbedContent) -> None:
        has_waits = any(edge.waits_for for edge in view.waits)
        if has_waits != self._waits_shown:
            self._waits_shown = has_waits
            (tabs.show_tab if has_waits else tabs.hide_tab)("waits")
        errors = sum(1 for f in view.findings if f.severity == "error")
        label = f"Findings ({len(view.findings)})" if view.findings else "Findings"
        tabs.get_tab("findings").label = f"[b red]{label}[/]" if errors else label
        total = len(view.ranks)
        if self.rank_filter:
            shown = sum(1 for _ in iter_ranks(view, self.rank_filter))
            tabs.get_tab("ranks").label = f"Ranks ({shown}/{total})"
        else:
            tabs.get_tab("ranks").label = f"Ranks ({total})"

    def watch_rank_filter(self) -> None:
        self._refresh_views()

    def action_show_tab(self, tab: str) -> None:
        if tab == "waits" and not self._waits_shown:
            return  # no wait-for graph in this report: the tab is hidden
        self.query_one(TabbedContent).active = tab
        self._focus_pane(tab, from_filter=True)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane.id or ""
        if pane in TABS:
            self._refresh_tab(pane)
            self._focus_pane(pane)

    def _focus_pane(self, pane: str, from_filter: bool = False) -> None:
        """Focus the main widget of a tab (focus is queued, so it lands after the switch)."""
        if isinstance(self.focused, Input) and not from_filter:
            return
        if pane != self.query_one(TabbedContent).active:
            return  # the user moved on; focusing this pane would switch back to it
        target = {
            "ranks": RankTable,
            "timeline": CollectiveTimeline,
            "findings": FindingsList,
            "profile": ProfileTable,
            "log": LogPane,
            "waits": WaitGraph,
        }[pane]
        widget = self.query_one(target)
        if pane == "profile" and not widget.display:
            return
        widget.focus()

    def action_filter(self) -> None:
        self.query_one("#filter-bar").display = True
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        filter_input = self.query_one("#filter", Input)
        filter_input.value = ""
        self.rank_filter = ""
        self.query_one("#filter-bar").display = False
        self._focus_pane(self.query_one(TabbedContent).active, from_filter=True)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.rank_filter = event.value.strip()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value.strip():
                self.query_one("#filter-bar").display = False
            self._focus_pane(self.query_one(TabbedContent).active, from_filter=True)


def timeline_legend() -> str:
    return (
        "[b]AR[/] all_reduce  [b]BC[/] broadcast  [b]AG[/] all_gather  [b]RS[/] reduce_scatter  "
        "[b]BR[/] barrier  [b]·[/] not reached   [u b]AR[/u b] in flight  "
        "[on red] AR [/] at fault  [black on yellow] AR [/] divergent seq  [b red]AR[/] differs"
    )
