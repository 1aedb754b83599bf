"""WaitGraph: who waits for whom (the report's wait-for graph) and the findings' cause chains."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from rich.tree import Tree
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddpdoctor.kinds import FindingKind
from ddpdoctor.report.console import finding_number
from ddpdoctor.tui.model import FindingView, RankView, ReportView, WaitEdge, seq_of
from ddpdoctor.tui.styles import SEVERITY_STYLES, STATE_STYLES


class WaitGraph(VerticalScroll, can_focus=True):
    """The wait-for graph as trees rooted at the ranks everyone ends up waiting on."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="wait-graph-text")

    def show(self, view: ReportView) -> None:
        key = (view.waits, view.findings, view.ranks)
        if key == self._shown:
            return
        self._shown = key
        self.query_one("#wait-graph-text", Static).update(wait_graph(view))


def waiters_of(waits: tuple[WaitEdge, ...]) -> dict[int, list[WaitEdge]]:
    """For each rank, the edges of the ranks that wait for it."""
    out: dict[int, list[WaitEdge]] = {}
    for edge in waits:
        for target in edge.waits_for:
            out.setdefault(target, []).append(edge)
    return out


def find_cycles(waits: tuple[WaitEdge, ...]) -> list[list[int]]:
    """The cycles of the graph, each as its ranks in wait order, each cycle once."""
    succ: dict[int, list[int]] = {}
    for edge in waits:
        succ.setdefault(edge.rank, []).extend(edge.waits_for)
    cycles: list[list[int]] = []
    seen: set[frozenset[int]] = set()

    def walk(path: list[int]) -> None:
        for nxt in succ.get(path[-1], []):
            if nxt == path[0]:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    cycles.append(list(path))
            elif nxt not in path and nxt > path[0] and len(path) < 16:
                walk(path + [nxt])

    for start in sorted(succ):
        walk([start])
    return cycles


def roots(waits: tuple[WaitEdge, ...]) -> list[int]:
    """The ranks waited on that wait for nobody: where the chains end."""
    blocked = {e.rank for e in waits if e.waits_for}
    return sorted({t for e in waits for t in e.waits_for} - blocked)


def _edge_text(edge: WaitEdge, targets: tuple[int, ...] | None = None) -> Text:
    where = "init_process_group" if edge.op == "init" else (edge.op or "a call")
    if edge.seq is not None:
        where += f" #{edge.seq}"
    others = targets if targets is not None else edge.waits_for
    text = Text.assemble((f"rank {edge.rank}", "bold"), " waits")
    if others:
        text.append(f" for rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}")
    text.append(f" in {where}", style="cyan")
    group = "the rendezvous" if edge.group == "rendezvous" else f"group {edge.group}"
    text.append(f" ({group})", style="dim")
    return text


def _cycle_title(cycle: list[int], findings: tuple[FindingView, ...]) -> Text:
    """"Deadlock" when a deadlock finding covers the cycle; else a cycle the findings explain
    by a root cause (a rank that skipped a call, say): named with it."""
    ring = " → ".join(f"rank {r}" for r in cycle + cycle[:1])
    errors = [f for f in findings if f.severity == "error"]
    if any(f.kind == FindingKind.DEADLOCK and set(cycle) <= set(f.ranks) for f in errors) or not errors:
        return Text.assemble(("Deadlock: ", "bold red"), (ring, "bold"))
    text = Text.assemble(("Waiting in a cycle: ", "bold yellow"), (ring, "bold"))
    cause = next((f for f in errors if set(f.ranks) & set(cycle)), None)
    if cause is not None:
        ranks = ", ".join(map(str, cause.ranks))
        text.append(f"  ← root cause: rank{'s' if len(cause.ranks) > 1 else ''} {ranks} ({cause.kind})",
                    style="bold red")
    return text


def _user_frame(rank: RankView) -> str:
    frame = next((f for f in rank.stack or () if not f.is_library), None)
    return f" at {frame.location} in {frame.name}" if frame is not None else ""


def _root_text(rank: int, view: ReportView) -> Text:
    info = view.rank(rank)
    text = Text.assemble((f"rank {rank}", "bold"))
    if info is None:
        return text.append(" (no trace: it never started or was never seen)", style="yellow")
    text.append(f" {info.state}", style=STATE_STYLES.get(info.state, ""))
    if info.current is not None and info.state not in ("exited", "failed", "killed"):
        text.append(f" in {info.current.op} #{seq_of(info.current)}", style="cyan")
    text.append(_user_frame(info))
    if info.exit_code is not None:
        text.append(f" (exit code {info.exit_code})", style="dim")
    return text


def _add_waiters(node: Tree, rank: int, waiting: dict[int, list[WaitEdge]], placed: set[int]) -> None:
    for edge in sorted(waiting.get(rank, []), key=lambda e: e.rank):
        if edge.rank in placed:
            continue
        placed.add(edge.rank)
        child = node.add(_edge_text(edge))
        _add_waiters(child, edge.rank, waiting, placed)


def _finding_label(finding: FindingView) -> Text:
    ranks = ", ".join(map(str, finding.ranks))
    number = f"finding {finding_number(finding.index)} " if finding.index is not None else ""
    return Text.assemble(
        (number, "bold"),
        (f" {finding.severity.upper()} ", SEVERITY_STYLES.get(finding.severity, "")),
        (f" {finding.kind}", "bold"),
        (f" rank{'s' if len(finding.ranks) > 1 else ''} {ranks}: " if ranks else ": ", "dim"),
        finding.summary,
    )


def cause_chains(findings: tuple[FindingView, ...]) -> list[Tree]:
    """Each root-cause finding with the consequences that point at it (``caused_by``)."""
    by_index = {f.index: f for f in findings if f.index is not None}
    children: dict[int, list[FindingView]] = {}
    for f in findings:
        if f.caused_by is not None and f.caused_by in by_index and f.caused_by != f.index:
            children.setdefault(f.caused_by, []).append(f)
    trees = []
    for f in findings:
        if f.index is None or f.index not in children or f.caused_by in by_index:
            continue
        tree = Tree(_finding_label(f), guide_style="dim")
        stack = [(tree, f)]
        done = {f.index}
        while stack:
            node, parent = stack.pop()
            for c in children.get(parent.index if parent.index is not None else -1, []):
                if c.index not in done:
                    done.add(c.index)
                    stack.append((node.add(_finding_label(c)), c))
        trees.append(tree)
    return trees


def wait_graph(view: ReportView) -> RenderableType:
    """The whole tab: chains to each root rank, the cycles, then the findings' cause chains."""
    parts: list[RenderableType] = []
    waits = tuple(e for e in view.waits if e.waits_for)
    if not waits:
        parts.append(Text("Nobody waits for anybody: no rank was blocked on another.", style="dim"))
    waiting = waiters_of(waits)
    for root in roots(waits):
        tree = Tree(Text.assemble(_root_text(root, view), ("  ← root cause", "bold red")), guide_style="yellow")
        _add_waiters(tree, root, waiting, {root})
        parts += [tree, Text("")]
    by_rank = {e.rank: e for e in waits}
    for cycle in find_cycles(waits):
        tree = Tree(_cycle_title(cycle, view.findings), guide_style="red")
        placed = set(cycle)
        for i, rank in enumerate(cycle):
            target = cycle[(i + 1) % len(cycle)]
            node = tree.add(_edge_text(by_rank[rank], (target,)))
            _add_waiters(node, rank, waiting, placed)
        parts += [tree, Text("")]
    chains = cause_chains(view.findings)
    if chains:
        parts.append(Text("Root causes and their consequences", style="bold underline"))
        parts += chains
    return Group(*parts)
