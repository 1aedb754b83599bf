"""A collective the user never wrote is shown with the API that issued it (report `origin`)."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.trace.origin import Origin
from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.model import ReportView
from ddpdoctor.tui.screens.rank import RankScreen, rank_header
from ddpdoctor.tui.widgets.rank_table import RankTable
from ddpdoctor.tui.widgets.timeline import CollectiveTimeline
from conftest import fixed_clock
from tui_reports import make_hang_report

SIZE = (140, 40)


def _report(tmp_path: Path) -> Path:
    """The 4-rank hang, rank 2's broadcast issued by DDP's forward (iteration 6)."""
    report = make_hang_report()
    rank2 = report["ranks"][2]
    rank2["current"].update(origin="ddp_forward", iteration=6)
    last = report["timeline"]["2"][-1]
    assert last["op"] == "broadcast" and last["end"] is None
    last.update(origin="ddp_forward", iteration=6)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def _plain(value: object) -> str:
    return getattr(value, "plain", str(value))


async def test_the_issuing_api_is_shown_beside_the_op(tmp_path: Path) -> None:
    app = make_app(_report(tmp_path), clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.screen.query_one(RankTable)
        assert _plain(table.get_cell("2", "op")).startswith("broadcast [DDP forward] 1 float32")
        assert "[" not in _plain(table.get_cell("0", "op"))  # the user's own all_reduce
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RankScreen) and screen.rank == 2
        recent = screen.query_one("#recent")
        ops = [_plain(recent.get_row_at(i)[1]) for i in range(recent.row_count)]  # seq, op, at
        assert ops[0] == "broadcast [DDP forward]"  # newest first
        assert all("[" not in op for op in ops[1:])


def test_the_rank_header_names_the_issuing_api(tmp_path: Path) -> None:
    view = ReportView.from_dict(json.loads(_report(tmp_path).read_text()))
    current = view.rank(2).current
    assert (current.origin, current.iteration) == (Origin.DDP_FORWARD, 6)
    assert "in broadcast seq 7 [DDP forward]" in rank_header(view.rank(2), view, 0.0).plain
    assert "in all_reduce seq 7 [4096x1024] float32" in rank_header(view.rank(0), view, 0.0).plain


async def test_the_timeline_marks_cells_an_api_issued(tmp_path: Path) -> None:
    app = make_app(_report(tmp_path), clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t")
        await pilot.pause()
        timeline = app.screen.query_one(CollectiveTimeline)
        grid = timeline.grid
        assert grid.origins == ("DDP forward",)
        assert timeline.border_subtitle == "italic: issued by DDP forward"
        assert timeline._cell_style(2, 7, grid.cells[(2, 7)]).italic
        assert not timeline._cell_style(0, 7, grid.cells[(0, 7)]).italic
