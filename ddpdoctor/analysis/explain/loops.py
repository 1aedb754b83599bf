"""What a rank's record says of its loops and turns: the loop it keeps turning in with no
collective (a poll, a retry), and the code its way at a decision jumped over."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ddpdoctor.analysis.explain.recorded import (RecordedDecision, body_lines, enters_body,
                                                 statement_at)
from ddpdoctor.analysis.load.flow import FlowSite
from ddpdoctor.analysis.load.user_source import _parse
from ddpdoctor.analysis.model import JobView


@dataclass(frozen=True)
class LoopEvidence:
    """The loop a rank keeps turning in with no collective: where, what its condition
    reads, and how often it turned since the rank's last collective."""

    file: str
    line: int
    source: str
    values: dict[str, str]
    turns: str  # "16+" when the count stopped at the limit

    def text(self, rank: int) -> str:
        vals = ", ".join(f"{k}={v}" for k, v in self.values.items())
        return (f"rank {rank} loops at {os.path.basename(self.file)}:{self.line} "
                f"`{self.source}`" + (f" ({vals})" if vals else "") +
                f", {self.turns} times since its last collective")

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "source": self.source,
                "values": dict(self.values), "turns": self.turns}


def current_loop(job: JobView, rank: int, at_line: int | None = None) -> LoopEvidence | None:
    """The loop of the rank's newest segment that turned most (the one around ``at_line``,
    its stack's line, where there is one): a poll, a retry, a wait the program chose."""
    run = job.ranks.get(rank)
    flow = run.flow if run is not None else None
    if flow is None or not flow.segments:
        return None
    segment = max(flow.segments, key=lambda s: s.number)
    best: tuple[tuple[bool, int], FlowSite, int, int, bool] | None = None
    for e in segment.entries:
        site = flow.sites.get(e.site)
        if site is None:
            continue
        node, _, _ = statement_at(site)
        if not (site.loop or isinstance(node, ast.While)):
            continue
        inward = 0 if site.loop or enters_body(site, 0, node) else 1
        turns = (e.fell, e.jumped)[inward]
        span = body_lines(node) if node is not None else None
        around = at_line is not None and span is not None and \
            site.line <= at_line <= span[1]
        rank_key = (around, turns)
        if turns and (best is None or rank_key > best[0]):
            best = (rank_key, site, inward, turns, e.saturated)
    if best is None:
        return None
    _, site, inward, turns, saturated = best
    _, _, source = statement_at(site)
    return LoopEvidence(site.file, site.line, source, flow.values(site.number, inward),
                        f"{turns}+" if saturated else str(turns))


def skipped_source(d: RecordedDecision, rank: int) -> str:
    """The source the rank's way at the decision jumped over: the rest of its function
    after a `return` (of its loop after a `break`/`continue`), the body it did not enter,
    or the `else` it did not take."""
    outcome = d.ranks[rank].outcome if rank in d.ranks else ""
    parsed = _parse(d.file)
    if parsed is None:
        return ""
    tree, text = parsed
    lines = text.splitlines()
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.If, ast.While)) and
                 n.lineno == d.line), None)
    if node is None:
        return ""
    end = node.end_lineno or node.lineno
    if outcome in ("return", "break", "continue") or outcome.startswith("raise"):
        outer = [n for n in ast.walk(tree) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While)) and
            n.lineno < d.line <= (n.end_lineno or n.lineno) and
            (outcome == "return" or isinstance(n, (ast.For, ast.While)))]
        stop = min((n.end_lineno or n.lineno for n in outer), default=len(lines))
        return "\n".join(lines[end:stop])
    if outcome == "false":
        span = body_lines(node)
        return "\n".join(lines[span[0] - 1:span[1]]) if span else ""
    if outcome == "true" and node.orelse:
        return "\n".join(lines[node.orelse[0].lineno - 1:end])
    return ""
