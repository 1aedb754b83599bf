"""FindingCard: one finding (severity, summary, detail, fix, evidence) as a panel."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text
from textual import events
from textual.widgets import Static

from ddpdoctor.report.console import finding_number
from ddpdoctor.report.lint_match import lint_note
from ddpdoctor.tui.evidence_text import evidence_sentences
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
    said = _evidence(finding.evidence) if finding.evidence else Text()
    if said:
        parts += [Text(""), Text("Evidence", style="bold dim"), said]
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
    """Evidence as sentences (evidence_text): the recorded decision first, no JSON."""
    return Text("\n".join(evidence_sentences(evidence)))
