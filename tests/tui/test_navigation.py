"""Pilot tests: tabs, choosing a rank, the stack view, filtering ranks, the help screen."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import TabbedContent

from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.screens.help import HelpScreen
from ddpdoctor.tui.screens.main import MainScreen
from ddpdoctor.tui.screens.rank import RankScreen
from ddpdoctor.tui.widgets.finding_card import FindingCard
from ddpdoctor.tui.widgets.findings_list import FindingsList
from ddpdoctor.tui.widgets.log_pane import LogPane
from ddpdoctor.tui.widgets.profile_table import ProfileTable
from ddpdoctor.tui.widgets.rank_table import RankTable
from ddpdoctor.tui.widgets.stack_view import StackView, stack_text
from ddpdoctor.tui.widgets.timeline import CollectiveTimeline
from conftest import fixed_clock

SIZE = (120, 40)


def app_for(path: Path):
    return make_app(path, clock=fixed_clock)


def cell_text(table: RankTable, row: str, column: str) -> str:
    value = table.get_cell(row, column)
    return getattr(value, "plain", value)


async def test_rank_table_shows_every_rank_with_state_and_op(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.screen.query_one(RankTable)
        assert table.row_keys == ["0", "1", "2", "3"]
        assert cell_text(table, "2", "state") == "hung"
        assert cell_text(table, "2", "op").startswith("broadcast 1 float32")
        assert cell_text(table, "0", "op").startswith("all_reduce 4096x1024")
        assert cell_text(table, "2", "rank") == "!2"  # the rank at fault is marked
        assert cell_text(table, "0", "time") == "1m01s"  # measured to the report's end, not now


async def test_keys_switch_tabs_and_focus(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.screen.query_one(TabbedContent)
        expected = {
            "t": ("timeline", CollectiveTimeline),
            "f": ("findings", FindingsList),
            "p": ("profile", ProfileTable),
            "l": ("log", LogPane),
            "r": ("ranks", RankTable),
        }
        for key, (tab, widget) in expected.items():
            await pilot.press(key)
            await pilot.pause()
            assert tabs.active == tab
            assert isinstance(app.focused, widget), (key, app.focused)


async def test_clicking_a_tab_switches_to_it(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#--content-tab-findings")
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "findings"


async def test_enter_on_a_rank_opens_its_stack_and_brackets_step(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RankScreen) and screen.rank == 2
        stack = screen.query_one(StackView)
        text = stack_text(stack.rank).plain
        assert "▶ sync_loss_scale" in text and "/home/ana/proj/train.py:63" in text
        assert "torch/distributed/distributed_c10d.py:2862" in text
        recent = screen.query_one("#recent")
        assert recent.row_count == 8
        await pilot.press("right_square_bracket")
        assert screen.rank == 3
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert screen.rank == 1
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_double_click_on_a_rank_row_opens_it(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.click(RankTable, offset=(3, 4), times=2)  # header is row 0: rank 3 is y=4
        await pilot.pause()
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 3


async def test_stack_sets_user_frames_apart_from_library_frames(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        text = stack_text(app.screen.query_one(StackView).rank)
        styles = {span.style for span in text.spans if "train.py" in text.plain[span.start : span.end]}
        dims = {span.style for span in text.spans if "c10d_logger" in text.plain[span.start : span.end]}
        assert any("bold" in str(s) for s in styles)
        assert all("dim" in str(s) for s in dims) and dims


async def test_filter_narrows_the_ranks_and_escape_clears_it(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(RankTable)
        await pilot.press("slash", *"2-3")
        await pilot.pause()
        assert table.row_keys == ["2", "3"]
        await pilot.press("enter")  # back to the table, filter kept
        await pilot.pause()
        assert app.focused is table and table.row_keys == ["2", "3"]
        await pilot.press("t")
        await pilot.pause()
        assert app.screen.query_one(CollectiveTimeline).grid.ranks == [2, 3]
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_keys == ["0", "1", "2", "3"]
        await pilot.press("slash", *"broadcast")
        await pilot.pause()
        assert table.row_keys == ["2"]
        await pilot.press("enter", "enter")
        await pilot.pause()
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 2


async def test_help_screen_opens_and_closes(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_timeline_highlights_the_divergent_seq_and_culprit(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t")
        await pilot.pause()
        timeline = app.screen.query_one(CollectiveTimeline)
        grid = timeline.grid
        assert grid.divergent_seq == 7 and 2 in grid.faulty
        assert grid.seqs == list(range(8))
        row2 = timeline.render_line(3).text  # header, r0, r1, r2
        assert row2.startswith("!r2") and row2.split()[-1] == "BC"
        fault_style = timeline._cell_style(2, 7, grid.cells[(2, 7)])
        assert fault_style.bgcolor is not None and fault_style.bgcolor.name == "red"
        assert timeline.selected_rank == 2, "the cursor starts on the rank at fault"
        await pilot.press("up", "up")
        assert timeline.selected_rank == 0
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 2


async def test_clicking_a_finding_opens_the_rank_at_fault(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        cards = list(app.screen.query(FindingCard))
        assert [c.finding.kind for c in cards] == ["collective_mismatch", "straggler"]
        await pilot.click(FindingCard, offset=(5, 2))
        await pilot.pause()
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 2


async def test_quit_key_exits(hang_report_path: Path) -> None:
    app = app_for(hang_report_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
