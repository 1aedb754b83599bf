"""SVG snapshots (120x40) of the main screens of a 4-rank collective_mismatch hang, and of 256 ranks.

Update with `python -m pytest tests/tui/test_snapshots.py --snapshot-update` and look at the
SVGs (tests/tui/__snapshots__/) before committing them.
"""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.tui.app import make_app
from conftest import FakeFeed, fixed_clock
from tui_reports import HANG_4RANKS, make_hang_report

SIZE = (120, 40)


def hang_app():
    return make_app(HANG_4RANKS, clock=fixed_clock)


def test_ranks_tab(snap_compare) -> None:
    assert snap_compare(hang_app(), terminal_size=SIZE)


def test_timeline_tab(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["t"], terminal_size=SIZE)


def test_findings_tab(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["f"], terminal_size=SIZE)


def test_profile_tab(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["p"], terminal_size=SIZE)


def test_rank_screen_of_the_culprit(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["down", "down", "enter"], terminal_size=SIZE)


def test_help_screen(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["question_mark"], terminal_size=SIZE)


def test_filtered_ranks(snap_compare) -> None:
    assert snap_compare(hang_app(), press=["slash", *"all_reduce", "enter"], terminal_size=SIZE)


def test_256_ranks_timeline(snap_compare, tmp_path: Path) -> None:
    report = make_hang_report(world_size=256, culprit=137, hang_seq=40)
    app = make_app(tmp_path, source=FakeFeed([report], finish_at_end=True), clock=fixed_clock)
    assert snap_compare(app, press=["t", "slash", *"130-160", "enter"], terminal_size=SIZE)
