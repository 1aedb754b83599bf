"""The live view: the table follows a source whose reports change; the log pane follows the job's output."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ddpdoctor.errors import UserError
from ddpdoctor.tui import source as source_module
from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.source import ReportSource
from ddpdoctor.tui.widgets.log_pane import LogPane
from ddpdoctor.tui.widgets.rank_table import RankTable
from ddpdoctor.tui.widgets.run_summary import RunSummary
from conftest import FakeFeed, fixed_clock
from tui_reports import live_variant

SIZE = (120, 40)


def state_of(table: RankTable, rank: int) -> str:
    return table.get_cell(str(rank), "state").plain


async def wait_until(pilot, predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


async def test_rank_state_changes_on_screen_as_the_data_changes(hang_report: dict[str, Any], tmp_path: Path) -> None:
    running = live_variant(hang_report, r0="computing", r1="computing", r2="computing", r3="computing")
    for rank in running["ranks"]:
        rank["current"] = None
    stepping = live_variant(hang_report, r0="in_collective", r1="in_collective", r2="computing", r3="waiting")
    hung = live_variant(hang_report, r0="hung", r1="hung", r2="hung", r3="hung")
    feed = FakeFeed([running])
    app = make_app(tmp_path, live_command=["train.py"], source=feed, clock=fixed_clock, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(RankTable)
        await wait_until(pilot, lambda: table.row_count == 4)
        assert state_of(table, 2) == "computing"
        assert app.live
        feed.serve(stepping)
        await wait_until(pilot, lambda: state_of(table, 3) == "waiting")
        assert state_of(table, 0) == "in_collective"
        assert table.get_cell("0", "op").plain.startswith("all_reduce")
        feed.serve(hung)
        await wait_until(pilot, lambda: state_of(table, 2) == "hung")
        assert table.rebuilds == 0, "live updates must change cells in place"
        assert table.cell_updates > 0
        assert "running" in app.screen.query_one(RunSummary).render().plain


async def test_polling_runs_at_four_hertz_or_more(hang_report: dict[str, Any], tmp_path: Path) -> None:
    feed = FakeFeed([live_variant(hang_report)])
    app = make_app(tmp_path, live_command=["train.py"], source=feed, clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.6)
        assert app.polls >= 5, app.polls  # 4 Hz: six polls in 1.6 s, one of slack


async def test_ui_keeps_the_final_report_when_the_job_ends(hang_report: dict[str, Any], tmp_path: Path) -> None:
    final = copy.deepcopy(hang_report)
    feed = FakeFeed([live_variant(hang_report, r2="computing")])
    app = make_app(tmp_path, live_command=["train.py"], source=feed, clock=fixed_clock, poll_interval=0.05)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        table = app.screen.query_one(RankTable)
        await wait_until(pilot, lambda: state_of(table, 2) == "computing")
        feed.serve(final, finish=True)
        await wait_until(pilot, lambda: not app.live)
        await pilot.pause(0.3)
        calls = feed.calls
        await pilot.pause(0.3)
        assert feed.calls == calls, "polling stops once the report is final"
        assert state_of(table, 2) == "hung"
        assert any("final report" in n.message for n in app._notifications)
        assert "HUNG" in app.screen.query_one(RunSummary).render().plain


async def test_waiting_for_first_trace_then_showing_ranks(hang_report: dict[str, Any], tmp_path: Path) -> None:
    not_yet = UserError(f"{tmp_path} has no traces yet")
    feed = FakeFeed([not_yet])
    app = make_app(tmp_path, live_command=["torchrun", "train.py"], source=feed, clock=fixed_clock, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        summary = app.screen.query_one(RunSummary)
        await pilot.pause(0.2)
        assert "waiting" in summary.render().plain and "no traces yet" in summary.render().plain
        table = app.screen.query_one(RankTable)
        assert table.row_count == 0
        feed.serve(live_variant(hang_report, r1="starting"))
        await wait_until(pilot, lambda: table.row_count == 4)
        assert state_of(table, 1) == "starting"


async def test_a_failing_poll_is_shown_as_an_error_notification(hang_report: dict[str, Any], tmp_path: Path) -> None:
    feed = FakeFeed([live_variant(hang_report)])
    app = make_app(tmp_path, live_command=["train.py"], source=feed, clock=fixed_clock, poll_interval=0.05)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: app.polls >= 1)
        feed.serve(ValueError("torn record in pid-7.ring"))
        await wait_until(pilot, lambda: any(n.severity == "error" for n in app._notifications))
        error = next(n for n in app._notifications if n.severity == "error")
        assert "torn record" in error.message
        assert app.screen.query_one(RankTable).row_count == 4


async def test_log_pane_follows_the_job_log(hang_report: dict[str, Any], tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[rank0] epoch 0 step 1 loss 2.30\n")
    feed = FakeFeed([live_variant(hang_report)])
    app = make_app(tmp_path, live_command=["train.py"], source=feed, job_log=log, clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        pane = app.screen.query_one(LogPane)
        await wait_until(pilot, lambda: any("loss 2.30" in line for line in pane.lines))
        with log.open("a") as handle:
            handle.write("[rank2] broadcast at train.py:63\n")
        await wait_until(pilot, lambda: any("train.py:63" in line for line in pane.lines))


async def test_run_dir_source_follows_a_live_run_then_its_report(hang_report: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run dir without report.json is built live; once the job ends, its report.json is shown."""
    run_dir = tmp_path / "run"
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"command": ["train.py"]}))
    current = {"report": live_variant(hang_report, r2="computing")}
    monkeypatch.setattr(source_module, "build_run_dir_report", lambda path: copy.deepcopy(current["report"]))
    running = {"value": True}
    source = ReportSource(run_dir, is_running=lambda: running["value"])
    app = make_app(run_dir, live_command=["train.py"], source=source, clock=fixed_clock, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(RankTable)
        await wait_until(pilot, lambda: table.row_count == 4)
        assert state_of(table, 2) == "computing"
        current["report"] = live_variant(hang_report, r2="waiting")
        await wait_until(pilot, lambda: state_of(table, 2) == "waiting")
        final = copy.deepcopy(hang_report)
        final["ranks"][2]["state"] = "killed"
        (run_dir / "report.json").write_text(json.dumps(final))
        running["value"] = False
        await wait_until(pilot, lambda: state_of(table, 2) == "killed")
        await wait_until(pilot, lambda: source.finished and not app.live)


def test_run_dir_with_report_and_no_live_process_is_finished(hang_report: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "pid-999999999.ring").write_bytes(b"")
    (tmp_path / "report.json").write_text(json.dumps(hang_report))
    source = ReportSource(tmp_path)
    report = source.poll()
    assert source.finished and report["live"] is False and report["outcome"] == "hung"
