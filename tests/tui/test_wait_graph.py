"""The Waits tab: who waits for whom, from the report's `waits` and the findings' `caused_by`."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.model import ReportView, WaitEdge
from ddpdoctor.tui.widgets.wait_graph import WaitGraph, cause_chains, find_cycles, roots, wait_graph
from conftest import FakeFeed, fixed_clock
from tui_reports import HANG_4RANKS, make_deadlock_report, make_waits_report

SIZE = (120, 40)


def render(view: ReportView) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(wait_graph(view))
    return out.getvalue()


def edge(rank: int, *targets: int, group: str = "0", seq: int = 1, op: str = "all_reduce") -> WaitEdge:
    return WaitEdge(rank, targets, group, seq, op)


def test_report_waits_and_caused_by_are_parsed() -> None:
    view = ReportView.from_dict(make_waits_report())
    assert view.waits[0] == WaitEdge(0, (1,), "0", 57, "all_reduce")
    by_index = {f.index: f for f in view.findings}
    assert by_index[1].caused_by == 0 and by_index[0].caused_by is None


def test_roots_are_where_the_chains_end() -> None:
    waits = (edge(0, 1), edge(2, 1), edge(3, 2))
    assert roots(waits) == [1]
    assert find_cycles(waits) == []


def test_cycles_are_found_once() -> None:
    waits = (edge(0, 1, group="1"), edge(1, 2, group="2"), edge(2, 0, group="3"), edge(3, 0))
    assert find_cycles(waits) == [[0, 1, 2]]
    assert roots(waits) == []


def test_chain_names_the_root_and_its_frame() -> None:
    text = render(ReportView.from_dict(make_waits_report()))
    assert "rank 1 computing at /home/ana/proj/eval.py:88 in evaluate" in text
    assert "root cause" in text
    assert "rank 0 waits for rank 1 in all_reduce #57 (group 0)" in text
    assert "rank 3 waits for rank 2 in broadcast #4 (group 1)" in text
    # rank 3 hangs below rank 2, which hangs below rank 1: a deeper line of the tree
    line_of = {name: next(line for line in text.splitlines() if name in line)
               for name in ("rank 2 waits", "rank 3 waits")}
    assert line_of["rank 3 waits"].index("rank 3") > line_of["rank 2 waits"].index("rank 2")


def test_consequences_hang_below_their_root_cause() -> None:
    view = ReportView.from_dict(make_waits_report())
    [tree] = cause_chains(view.findings)
    assert "missing_collective" in str(tree.label)
    [child] = tree.children
    assert "gloo timed out" in str(child.label)
    [grandchild] = child.children
    assert "connection closed" in str(grandchild.label)


def test_deadlock_names_every_rank_and_group() -> None:
    text = render(ReportView.from_dict(make_deadlock_report()))
    assert "Deadlock: rank 0 → rank 1 → rank 0" in text
    assert "rank 0 waits for rank 1 in all_reduce #0 (group 1)" in text
    assert "rank 1 waits for rank 0 in all_reduce #0 (group 2)" in text


def test_garbage_waits_are_skipped() -> None:
    view = ReportView.from_dict({"waits": [{"rank": "x"}, 3, {"rank": 1, "waits_for": ["2", None]}]})
    assert view.waits == (WaitEdge(1, (2,), "0", None, ""),)


async def test_waits_tab_appears_only_with_a_wait_for_graph(tmp_path: Path) -> None:
    app = make_app(HANG_4RANKS, clock=fixed_clock)  # a report without waits
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("w")
        await pilot.pause()
        assert app.screen.query_one("#tabs").active == "ranks"
    app = make_app(tmp_path, source=FakeFeed([make_waits_report()], finish_at_end=True), clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("w")
        await pilot.pause()
        assert app.screen.query_one("#tabs").active == "waits"
        graph = app.screen.query_one(WaitGraph)
        assert graph.has_focus
        out = io.StringIO()
        Console(file=out, width=120, color_system=None).print(graph.query_one("#wait-graph-text").content)
        assert "rank 0 waits for rank 1 in all_reduce #57" in out.getvalue()


def test_waits_tab_snapshot(snap_compare, tmp_path: Path) -> None:
    app = make_app(tmp_path, source=FakeFeed([make_waits_report()], finish_at_end=True), clock=fixed_clock)
    assert snap_compare(app, press=["w"], terminal_size=SIZE)
