"""FindingCard: one finding (severity, summary, detail, fix, evidence) as a panel."""

from __future__ import annotations

import json
from typing import Any, Mapping

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text
from textual import events
from textual.widgets import Static

from ddpdoctor.report.console import finding_number
from ddpdoctor.report.lint_match import LINT_KEY, lint_note
from ddpdoctor.tui.messages import RankSelected
from ddpdoctor.tui.model import FindingView
from ddpdoctor.tui.styles import SEVERITY_STYLES

BORDER_STYLES = {"error": "red", "warning": "yellow", "info": "blue"}


class FindingCard(Static):
    """A finding; a click opens the stack of the first rank it names."""

    def __init__(self, finding: FindingView, **kwargs: object) -> None:
        super().__init__(finding_panel(finding), **kwargs)  # type: ignore[arg-type]
        self.finding = finding

    def on_click(self, event: events.Click) -> None:
        if self.finding.ranks:
            event.stop()
            self.post_message(RankSelected(self.finding.ranks[0]))


def finding_panel(finding: FindingView) -> RenderableType:
    """A finding as a Rich panel."""
    number = f" finding {finding_number(finding.index)}" if finding.index is not None else ""
    title = Text.assemble(
        (number, "bold"),
        (f" {finding.severity.upper()} ", SEVERITY_STYLES.get(finding.severity, "")),
        (f" {finding.kind} ", "bold"),
    )
    where = []
    if finding.seq is not None:
        where.append(f"seq {finding.seq}")
    if finding.ranks:
        shown = ", ".join(map(str, finding.ranks[:16])) + (" …" if len(finding.ranks) > 16 else "")
        where.append(f"rank{'s' if len(finding.ranks) > 1 else ''} {shown}")
    parts: list[RenderableType] = [Text(finding.summary, style="bold")]
    if finding.caused_by is not None:
        parts.append(Text(f"a consequence of finding {finding_number(finding.caused_by)}",
                          style="dim"))
    if finding.detail:
        parts += [Text(""), Text(finding.detail)]
    note = lint_note({"evidence": dict(finding.evidence)})
    if note:
        parts += [Text(""), Text(note[0].upper() + note[1:] + ".", style="bold cyan")]
    if finding.fix:
        parts += [Text(""), Text.assemble(("Fix: ", "bold green"), finding.fix)]
    if finding.evidence:
        parts += [Text(""), Text("Evidence", style="bold dim"), _evidence(finding.evidence)]
    return Panel(
        Group(*parts),
        title=title,
        title_align="left",
        subtitle=" · ".join(where) or None,
        subtitle_align="right",
        border_style=BORDER_STYLES.get(finding.severity, "white"),
        padding=(0, 1),
    )


def _evidence(evidence: Mapping[str, Any]) -> Text:
    """Evidence compactly: a line a key, nested objects one level deeper, values as JSON."""
    text = Text()
    for key, value in evidence.items():
        if key == LINT_KEY:
            continue  # said in words above the evidence
        if isinstance(value, dict) and value:
            text.append(f"{key}:\n", style="cyan")
            for sub_key, sub_value in value.items():
                text.append(f"  {sub_key}: ", style="cyan")
                text.append(f"{_compact(sub_value)}\n")
        else:
            text.append(f"{key}: ", style="cyan")
            text.append(f"{_compact(value)}\n")
    text.rstrip()
    return text


def _compact(value: Any, limit: int = 300) -> str:
    try:
        out = json.dumps(value, default=str, separators=(", ", ": "))
    except (TypeError, ValueError):
        out = repr(value)
    return out if len(out) <= limit else out[: limit - 1] + "…"
