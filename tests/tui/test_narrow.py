"""An 80x24 terminal: the current op and the user's site get the width first, the finding
card says what lint saw before the run, and ddpdoctor's own frames are folded in a stack.
The report is a real one: the catalogued bug barrier_in_rank0_checkpoint run under ddpdoctor.

Update with `python -m pytest tests/tui/test_narrow.py --snapshot-update` and look at the SVGs
(tests/tui/__snapshots__/test_narrow/) before committing them."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from conftest import fixed_clock
from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.model import Frame
from ddpdoctor.tui.widgets.rank_table import column_widths, fit_site
from ddpdoctor.tui.widgets.stack_view import is_ddpdoctor_frame

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "reports"
BARRIER = REPORTS / "barrier_in_rank0_checkpoint.json"
SIZE = (80, 24)


def app():
    return make_app(BARRIER, clock=fixed_clock)


def screen_text(running_app) -> str:
    width, height = running_app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True)
    console.print(running_app.screen._compositor.render_update(
        full=True, screen_stack=running_app._background_screens))
    return console.export_text()


def test_ranks_at_80x24(snap_compare) -> None:
    assert snap_compare(app(), terminal_size=SIZE)


def test_findings_at_80x24(snap_compare) -> None:
    assert snap_compare(app(), press=["f"], terminal_size=SIZE)


def test_rank_screen_at_80x24(snap_compare) -> None:
    assert snap_compare(app(), press=["enter"], terminal_size=SIZE)


async def test_op_and_site_shown_whole_enough_at_80_columns() -> None:
    running = app()
    async with running.run_test(size=SIZE) as pilot:
        for _ in range(50):  # until the table is laid out at its width (no time limit)
            await pilot.pause()
            text = screen_text(running)
            if "…oint.py:55" in text:
                break
    assert "barrier " in text and "all_reduce [DDP" in text
    assert "…oint.py:60" in text and "…oint.py:55" in text  # the line is never cut


async def test_finding_card_numbers_and_lint(tmp_path) -> None:
    running = app()
    async with running.run_test(size=(100, 60)) as pilot:
        await pilot.press("f")
        await pilot.pause()
        text = screen_text(running)
    assert "finding 1" in text and "finding 0" not in text
    assert "Lint saw this at barrier_in_rank0_checkpoint.py:60 before the run" in text


async def test_stack_folds_ddpdoctors_frames() -> None:
    running = app()
    async with running.run_test(size=(120, 40)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        text = screen_text(running)
    assert "frames of ddpdoctor's instrumentation folded away" in text
    assert "patches.py" not in text and "barrier_in_rank0_checkpoint.py:60" in text


def test_widths_go_to_op_and_site_first() -> None:
    narrow, wide = column_widths(80, 2), column_widths(160, 2)
    assert narrow["op"] >= 18 and narrow["site"] >= 14
    assert 4 + 2 + 11 + 2 + narrow["op"] + 2 + 6 + 2 + narrow["site"] + 2 <= 80 - 2
    assert wide == {"op": 34, "site": 30}


def test_a_site_is_cut_in_its_name_never_its_line() -> None:
    assert fit_site("train.py:37", 20) == "train.py:37"
    cut = fit_site("barrier_in_rank0_checkpoint.py:60", 24)
    assert len(cut) == 24 and cut.endswith(".py:60") and "…" in cut


def test_own_frames_are_ddpdoctors_package_only() -> None:
    assert is_ddpdoctor_frame(Frame("wait", "/x/site-packages/ddpdoctor/runtime/patches.py", 3))
    assert not is_ddpdoctor_frame(Frame("main", "/home/ana/ddpdoctor/train.py", 3))
