"""One-screen console summary of a report, with rich."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ddpdoctor.analysis.model import rank_groups, ranks_text
from ddpdoctor.report.lint_match import lint_note
from ddpdoctor.terminal_text import SafeConsole

STATE_STYLE = {"computing": "green", "in_collective": "cyan", "waiting": "yellow",
               "exited": "dim", "failed": "bold red", "hung": "bold magenta",
               "stopped": "bold yellow", "killed": "bold red", "starting": "dim",
               "unreachable": "bold yellow"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "blue"}
OUTCOME_STYLE = {"completed": "bold green", "failed": "bold red", "hung": "bold magenta",
                 "interrupted": "bold yellow", "running": "bold cyan"}
MAX_RANK_ROWS = 16
UNKNOWN = "?"  # a number not known (null in the report)
WIDE = 100_000  # the width of a table off a terminal: its own, never cut


def _op(current: Any) -> str:
    if not isinstance(current, dict) or not current:
        return ""
    shapes = [s for s in current.get("shapes") or [] if isinstance(s, (list, tuple))]
    dtypes = current.get("dtypes") or []
    tensors = ", ".join(f"{d}{list(s)}" for d, s in zip(dtypes or ["?"] * len(shapes), shapes))
    return f"{current.get('op')}({tensors}) #{_known(current.get('seq'))}"


def _known(value: Any) -> str:
    """A number as shown: ``?`` where it is not known (null: a rank seen from its stack
    alone), never ``None``."""
    return UNKNOWN if value is None else str(value)


def rank_table(report: dict[str, Any]) -> RenderableType:
    """A row a rank; past MAX_RANK_ROWS ranks, a row a group of ranks that do the same
    (``rank_groups_shown``)."""
    ranks = [r for r in report.get("ranks") or [] if isinstance(r, dict)]
    if len(ranks) > MAX_RANK_ROWS:
        return rank_groups_shown(report, ranks)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("rank", "state", "pid", "step", "seq"):
        table.add_column(col, no_wrap=True)
    # the op and the user's file:line fold onto a second line at 80 columns, never cut
    table.add_column("inside", overflow="fold", ratio=1)
    table.add_column("at", overflow="fold", ratio=1)
    for r in ranks:
        state = str(r.get("state"))
        cur = r.get("current") or {}
        table.add_row(str(r.get("rank")), Text(state, STATE_STYLE.get(state, "")),
                      _known(r.get("pid")), _known(r.get("step")),
                      str(r.get("last_seq") if r.get("last_seq") is not None else "-"),
                      _op(cur), str(cur.get("callsite", "")) if cur else "")
    return table


def culprits(report: dict[str, Any]) -> frozenset[int]:
    """The ranks the first error finding names (the root cause's), else none."""
    for f in report.get("findings") or []:
        if isinstance(f, dict) and f.get("severity") == "error":
            return frozenset(r for r in f.get("ranks") or [] if isinstance(r, int))
    return frozenset()


def _span(name: str, values: list[Any]) -> str:
    """``step 10``, or the lowest and highest of the ranks' values (``steps 9-10``)."""
    known = sorted({v for v in values if isinstance(v, int)})
    if not known:
        return f"{name} {UNKNOWN}"
    return f"{name} {known[0]}" if len(known) == 1 else f"{name}s {known[0]}-{known[-1]}"


def rank_groups_shown(report: dict[str, Any], ranks: list[dict[str, Any]]) -> Group:
    """Ranks grouped by what they do (state, the call they are in, its line), as LLNL's
    STAT groups processes by stack: a line a group (``ranks 0-6144, 6146-8191 (8191 ranks)
    hung in all_reduce(float32[2177]) #12 at train.py:32 (step 10, seq 12)``), the root
    cause's ranks first (a line of their own), then the groups in a state worth a look,
    then the rest; at most MAX_RANK_ROWS lines."""
    blamed = culprits(report)
    by_rank = {r.get("rank"): r for r in ranks if isinstance(r.get("rank"), int)}

    def key(r: dict[str, Any]) -> tuple[bool, str, str, str]:
        cur = r.get("current") if isinstance(r.get("current"), dict) else {}
        return (r.get("rank") in blamed, str(r.get("state")), _op(cur),
                str(cur.get("callsite", "")) if cur else "")

    groups = rank_groups({n: key(r) for n, r in by_rank.items()})
    groups.sort(key=lambda g: (not g[1][0], g[1][1] in ("computing", "exited",
                                                        "in_collective")))
    lines = []
    for members, (_, state, inside, at) in groups[:MAX_RANK_ROWS]:
        rows = [by_rank[n] for n in members]
        line = Text(f"{ranks_text(members, count=True)} ")
        line.append(state, STATE_STYLE.get(state, ""))
        line.append((f" in {inside}" if inside else "") + (f" at {at}" if at else "") +
                    f" ({_span('step', [r.get('step') for r in rows])}, "
                    f"{_span('seq', [r.get('last_seq') for r in rows])})")
        lines.append(line)
    rest = groups[MAX_RANK_ROWS:]
    if rest:
        lines.append(Text(f"… {len(rest)} more groups "
                          f"({_ranks_word(sum(len(m) for m, _ in rest))})"))
    return Group(*lines)


def _waited(w: dict[str, Any]) -> str:
    """``for rank 1 in all_reduce #57`` from a report's ``waits`` entry."""
    targets = [t for t in w.get("waits_for") or [] if isinstance(t, int)]
    op = str(w.get("op"))
    what = f"{op} #{w.get('seq')}" if w.get("seq") is not None else \
        ("init_process_group" if op == "init" else op)
    group = f" on group {w.get('group')}" if str(w.get("group")) not in ("0", "rendezvous") \
        else ""
    return f"for {ranks_text(targets)} in {what}{group}"


def wait_lines(waits: list[dict[str, Any]]) -> list[str]:
    """``rank 0 waits for rank 1 in all_reduce #57`` a report's ``waits`` entry, ranks
    that wait alike on one line (``ranks 0-6144, 6146-8191 (8191 ranks) wait for rank
    6145 in all_reduce #12``)."""
    return [f"{ranks_text(members, count=True)} wait{'s' if len(members) == 1 else ''} "
            f"{what}" for members, what in rank_groups(
                {w["rank"]: _waited(w) for w in waits if isinstance(w.get("rank"), int)})]


NO_ACTIVITY = "no torch.distributed activity was recorded"
NEVER_INITIALIZED = f"{NO_ACTIVITY}: the job never called init_process_group"


def _no_activity_text(report: dict[str, Any]) -> str:
    """The supervisor's note on why no rank was recorded, as a sentence."""
    notes = [n for n in report.get("notes") or []
             if isinstance(n, str) and n.startswith(NO_ACTIVITY)]
    note = notes[0] if notes else NEVER_INITIALIZED
    return note[0].upper() + note[1:] + "."


class ClosableConsole(SafeConsole):  # type: ignore[misc,valid-type]
    """ddpdoctor's console (made safe: terminal_text) on an output its reader may close
    (`| head`, a killed `| tee`: EPIPE) or whose terminal may hang up (EIO): it falls silent
    instead of exiting (rich's default) or raising; the exit status stays the command's (a
    run's supervisor sees the closed output, or gets SIGHUP, and ends the run as
    interrupted, with a report)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().print(*args, **kwargs)
        except OSError:  # a hung-up terminal: EIO
            self.quiet = True


def summary_console(file: IO[str] | None = None) -> Console:
    """A console for the summary on ``file`` (stdout): on a terminal (or at the COLUMNS the
    user set) boxes at its width; elsewhere (a pipe, a log, CI) never hard-wrapped: the
    plain layout (``soft_wrap``), a path or a command never split, a table never cut."""
    console = ClosableConsole(file=file or sys.stdout, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.soft_wrap = True
    return console


def show_report(report: dict[str, Any], path: Path | None, console: Console,
                shown: str = "summary") -> None:
    """What stdout gets once there is a report: the summary, the verdict line and the
    report's path (``quiet``), or the report as JSON and nothing else (``json``)."""
    if shown == "json":
        try:
            console.file.write(json.dumps(report, indent=2, default=str) + "\n")
            console.file.flush()
        except OSError:  # its reader went (`| head`): nobody reads the rest
            console.quiet = True
    elif shown == "quiet":
        console.print(verdict_line(report), soft_wrap=True)
        if path is not None:
            console.print(Text(f"Report: {path}"), soft_wrap=True)
    else:
        print_summary(report, path, console)


def verdict_line(report: dict[str, Any]) -> Text:
    """``ddpdoctor: hung (2 ranks): <the first finding's summary>`` on one line."""
    outcome = str(report.get("outcome"))
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    line = Text.assemble(("ddpdoctor: ", "bold"), (outcome, OUTCOME_STYLE.get(outcome, "")),
                         f" ({_ranks_word(report.get('world_size'))})" if report.get("ranks")
                         else " (no rank recorded)")
    first = next((f for f in findings if f.get("severity") == "error"),
                 findings[0] if findings else None)
    if first is not None:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        line.append(f": {first.get('severity')} {first.get('kind')}: "
                    f"{' '.join(str(first.get('summary', '')).split())}{more}")
    elif report.get("ranks"):
        line.append(": no problem found")
    return line


def print_summary(report: dict[str, Any], path: Path | None, console: Console) -> None:
    """Outcome, ranks, findings (errors first), notes and where the report is; boxed on a
    terminal, plain (never hard-wrapped) where ``console.soft_wrap`` (a pipe, a log)."""
    plain = console.soft_wrap
    outcome = str(report.get("outcome"))
    title = Text.assemble(("ddpdoctor: ", "bold"), (outcome, OUTCOME_STYLE.get(outcome, "")),
                          f"  ({_ranks_word(report.get('world_size'))})" if report.get("ranks")
                          else "  (no rank recorded)")
    console.print()
    console.rule(title)
    if report.get("ranks"):
        # off a terminal at its natural width: every cell whole, none cut with "..."
        _print_whole(console, rank_table(report)) if plain else print_table(console, rank_table(report))
    waits = wait_lines([w for w in report.get("waits") or []
                        if isinstance(w, dict) and w.get("waits_for")])
    for line in waits[:8]:
        console.print(Text(line, "yellow"))
    if len(waits) > 8:
        console.print(f"… and {len(waits) - 8} more lines of ranks waiting")
    findings = report.get("findings") or []
    if not findings:
        if report.get("ranks"):
            console.print(Text("No problem found.", "green"))
        else:
            console.print(Text(_no_activity_text(report), "yellow"))
    for number, f in enumerate(findings[:8], start=1):
        sev = str(f.get("severity"))
        head = Text(f"finding {number}, {sev}: {f.get('kind')}", SEVERITY_STYLE.get(sev, ""))
        body = finding_body(f)
        if plain:
            console.print(head)
            for line in body.split("\n"):
                console.print(Text("  ") + line if line.plain else line)
        else:
            console.print(Panel(body, title=head, title_align="left",
                                border_style=SEVERITY_STYLE.get(sev, "")))
    if len(findings) > 8:
        console.print(f"… and {len(findings) - 8} more findings in the report")
    for problem in (report.get("problems") or [])[:5]:
        console.print(Text(f"note: {problem}", "dim"))
    if path is not None:
        console.print(Text(f"Report: {path}"), soft_wrap=True)  # a path is never split


def _print_whole(console: Console, renderable: RenderableType) -> None:
    """``renderable`` at its own width, however wide (rich's print takes no wider one)."""
    width = console.width
    console.width = WIDE
    try:
        lines = console.render_lines(renderable, console.options, pad=False)
    finally:
        console.width = width
    _print_lines(console, lines)


def print_table(console: Console, table: RenderableType) -> None:
    """A table as rich lays it out; off a terminal (a log, a pipe, CI) each row without the
    padding spaces rich ends it with."""
    if console.is_terminal:
        console.print(table)
        return
    _print_lines(console, console.render_lines(table, console.options, pad=False))


def _print_lines(console: Console, lines: list[list[Any]]) -> None:
    """Rendered lines, each with its trailing spaces stripped."""
    for line in lines:
        text = Text.assemble(*((s.text, s.style) for s in line if not s.control))
        text.rstrip()
        console.print(text, soft_wrap=True)


def finding_body(f: dict[str, Any]) -> Text:
    """A finding's text: what it is a consequence of, its summary, its detail (each
    sentence once: none the summary or the fix already says), lint's note, the fix."""
    body = Text(overflow="fold")
    if isinstance(f.get("caused_by"), int):
        body.append(f"(a consequence of finding {finding_number(f['caused_by'])})\n", "dim")
    summary, fix = str(f.get("summary", "")), str(f.get("fix") or "")
    body.append(summary + "\n", "bold")
    detail = said_once(str(f.get("detail") or "")[:1500], (summary, fix))
    if detail:
        body.append(detail + "\n")
    note = lint_note(f)
    if note:
        body.append(note[0].upper() + note[1:] + ".\n", "cyan")
    if fix:
        body.append("Fix: ", "bold green")
        body.append(fix)
    body.rstrip()
    return body


def said_once(detail: str, already: tuple[str, ...]) -> str:
    """``detail`` without the sentences (or the clauses of one, parted by "; ") said
    already in ``already`` or earlier in it: each fact once in a finding's box."""
    seen = {_said(c) for text in already for s in _sentences(text) for c in _clauses(s)}
    kept = []
    for line in detail.split("\n"):
        sentences = []
        for sentence in _sentences(line):
            clauses = [c for c in _clauses(sentence) if _said(c) not in seen]
            seen.update(_said(c) for c in clauses)
            if clauses:
                text = "; ".join(clauses)
                sentences.append(text if text[-1] in ".:!?" or len(clauses) == 1 and
                                 clauses[0] == sentence else text + ".")
        if sentences or not line.strip():
            indent = line[:len(line) - len(line.lstrip())]
            kept.append(indent + " ".join(sentences))
        elif kept and kept[-1].endswith(":"):  # what it introduced was said: it ends here
            kept[-1] = kept[-1][:-1] + "."
    return "\n".join(kept).strip("\n")


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", text.strip()) if s]


def _clauses(sentence: str) -> list[str]:
    return [c for c in re.split(r";\s+", sentence) if c]


def _said(sentence: str) -> str:
    return " ".join(sentence.lower().rstrip(".").split())


def finding_number(index: int) -> int:
    """Findings are numbered from 1 for people wherever they are shown (console, why text,
    TUI); ``caused_by`` in report.json stays the 0-based index into ``findings``."""
    return index + 1


def _ranks_word(n: object) -> str:
    """"1 rank", "4 ranks"."""
    return f"{n} rank" if n == 1 else f"{n} ranks"
