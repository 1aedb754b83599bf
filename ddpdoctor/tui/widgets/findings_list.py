"""FindingsList: every finding of a report, most severe first, and the trace problems."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddpdoctor.tui.model import FindingView, ReportView
from ddpdoctor.tui.widgets.finding_card import FindingCard


class FindingsList(VerticalScroll, can_focus=True):
    """The findings as cards; rebuilt only when they change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[tuple[FindingView, ...], tuple[str, ...]] | None = None

    def show(self, view: ReportView) -> None:
        key = (view.findings, view.problems)
        if key == self._shown:
            return
        self._shown = key
        kept = self.scroll_y  # a live job's findings change as its waits grow: stay put
        self.remove_children()
        widgets: list[Static] = []
        if view.problems:
            text = Text("Trace problems (the report may be incomplete):\n", style="bold yellow")
            for problem in view.problems:
                text.append(f"  ⚠ {problem}\n", style="yellow")
            widgets.append(Static(text, classes="problems"))
        widgets += [FindingCard(f, classes=f"finding {f.severity}") for f in view.findings]
        if not view.findings:
            message = "No findings yet: the job looks healthy so far." if view.live else "No findings: nothing went wrong that ddpdoctor can tell."
            widgets.append(Static(message, classes="empty"))
        self.mount_all(widgets)
        if kept:
            self.call_after_refresh(self.scroll_to, y=kept, animate=False)
