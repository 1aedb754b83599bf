"""RunSummary: the top bar: outcome, ranks, command, and the most important finding."""

from __future__ import annotations

import shlex
from collections import Counter

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ddpdoctor.tui.model import ReportView
from ddpdoctor.tui.styles import SEVERITY_STYLES, STATE_STYLES, format_duration

OUTCOME_STYLES = {
    "hung": "bold white on red",
    "failed": "bold white on red",
    "completed": "bold black on green",
    "running": "bold black on green",  # a live view's outcome
}


class RunSummary(Static):
    """What the run is and how it ended, in two or three lines."""

    view: reactive[ReportView | None] = reactive(None, always_update=True)
    waiting_message: reactive[str] = reactive("")

    def __init__(self, command: tuple[str, ...] = (), **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.command = command
        self.now = 0.0
        self._lines = -1

    def watch_view(self) -> None:
        lines = self.render().plain.count("\n")
        if lines != self._lines:
            self._lines = lines
            self.refresh(layout=True)

    def render(self) -> Text:
        view = self.view
        if view is None:
            line = Text.assemble(("○ waiting ", "bold yellow"), " ", shlex.join(self.command))
            if self.waiting_message:
                line.append(f"\n{self.waiting_message}", style="dim")
            return line
        return summary_text(view, self.now, self.content_size.width or 120)


def attempts_text(view: ReportView, width: int = 120) -> Text:
    """A restarted job: which attempt this is, how each ended, how to open another."""
    line = Text(f" attempt {view.attempt if view.attempt is not None else '?'}:", style="bold")
    for attempt, outcome, _ in view.attempts:
        line.append(f" {attempt} ")
        line.append(outcome or "?", style=OUTCOME_STYLES.get(outcome, ""))
    others = [path for attempt, _, path in view.attempts if attempt != view.attempt and path]
    if others:
        where = others[0].rsplit("/", 1)[0]
        run_dir = view.run_dir.rstrip("/")
        if run_dir.rsplit("/", 1)[-1].startswith("attempt-"):  # the report of one attempt
            where = f"{run_dir.rsplit('/', 1)[0]}/{where}"
        line.append(f" · open another: ddpdoctor ui {where}", style="dim")
    line.truncate(width, overflow="ellipsis")
    return line


def summary_text(view: ReportView, now: float, width: int = 120) -> Text:
    """The summary of a report as styled text; the first two lines cut to `width`."""
    text = Text()
    if view.live:
        text.append(" ● running ", style="bold black on green")
    else:
        outcome = view.outcome or "unknown"
        text.append(f" {outcome.upper()} ", style=OUTCOME_STYLES.get(outcome, "bold reverse"))
    world = view.world_size if view.world_size is not None else len(view.ranks)
    text.append(f"  {world} ranks", style="bold")
    if view.started_at is not None:
        end = now if view.live or view.ended_at is None else view.ended_at
        text.append(f" · {format_duration(max(0.0, end - view.started_at))}")
    if view.command:
        text.append(f" · {shlex.join(view.command)}", style="italic")
    if view.run_dir:
        text.append(f" · {view.run_dir}", style="dim")
    text.truncate(width, overflow="ellipsis")
    text.append("\n")
    states = Text()
    counts = Counter(r.state for r in view.ranks)
    for state, count in sorted(counts.items()):
        states.append(f" {state}", style=STATE_STYLES.get(state, ""))
        states.append(f" {count}  ")
    if view.problems:
        states.append(f" ⚠ {len(view.problems)} trace problem(s), see Findings", style="bold yellow")
    if view.transports:  # on the states' line: the top finding below keeps two lines at 80
        states.append(f"· {view.transports}", style="dim")
    states.truncate(width, overflow="ellipsis")
    text.append_text(states)
    if view.attempts:
        text.append("\n")
        text.append_text(attempts_text(view, width))
    top = view.findings[0] if view.findings else None
    if top is not None:
        text.append("\n")
        text.append(f" {top.severity.upper()} ", style=SEVERITY_STYLES.get(top.severity, ""))
        text.append(f" {top.kind}: ", style="bold")
        text.append(top.summary)
    return text
