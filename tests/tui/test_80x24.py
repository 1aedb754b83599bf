"""The UI at 80x24 on a real report (rank 1 blocked on a lock while rank 0 waits in all_reduce,
from `ddpdoctor run` of such a job): the stuck rank's op and line, a rank table and a footer
not cut, evidence as sentences, Ctrl-C quits, Down scrolls a line a key in Findings, also
while a live job's findings change under it.

Update the snapshots with `python -m pytest tests/tui/test_80x24.py --snapshot-update` and
look at the SVGs (tests/tui/__snapshots__/test_80x24/) before committing them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from conftest import FakeFeed, fixed_clock
from test_narrow import screen_text
from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.evidence_text import clock, evidence_sentences
from ddpdoctor.tui.widgets.findings_list import FindingsList
from ddpdoctor.tui.widgets.rank_table import columns_shown_whole, RankTable

REPORT = Path(__file__).resolve().parent.parent / "fixtures" / "reports" / "rank1_lock.json"
SIZE = (80, 24)


def app():
    return make_app(REPORT, clock=fixed_clock)


def test_ranks_at_80x24(snap_compare) -> None:
    assert snap_compare(app(), terminal_size=SIZE)


def test_findings_at_80x24(snap_compare) -> None:
    assert snap_compare(app(), press=["f", "end"], terminal_size=SIZE)


async def test_the_stuck_rank_its_wait_and_line_and_nothing_cut() -> None:
    running = app()
    async with running.run_test(size=SIZE) as pilot:
        for _ in range(20):
            await pilot.pause()
        lines = screen_text(running).splitlines()
        table = running.screen.query_one(RankTable)
        shown = columns_shown_whole(table)
    header = next(line for line in lines if " rank " in line and " state " in line)
    stuck = next(line for line in lines if line.lstrip().startswith("!1"))
    assert "in futex" in stuck and "lockjob.py:9" in stuck
    assert header.split()[-1] in ("seq", "step", "epoch", "host", "pid")
    assert header.rstrip().endswith(header.split()[-1])  # a whole column name, not cut
    assert len(shown) >= 6  # rank, state, op, time, at, seq at least
    footer = lines[-1]
    assert "q Quit" in footer and "? Help" in footer and "palette" not in footer


async def test_ctrl_c_quits() -> None:
    running = app()
    async with running.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not running.is_running and running.return_code == 130


def _live(report: dict, waited: float) -> dict:
    out = copy.deepcopy(report)
    out["live"], out["outcome"] = True, ""
    out["findings"][0]["detail"] = out["findings"][0]["detail"].replace(
        "Waiting for 4.7 s.", f"Waiting for {waited:.1f} s.")
    return out


async def test_down_scrolls_a_line_a_key_in_findings_as_they_change(tmp_path) -> None:
    report = json.loads(REPORT.read_text())
    feed = FakeFeed([_live(report, 4.7 + i / 10) for i in range(200)])
    running = make_app(tmp_path, live_command=["train.py"], source=feed, clock=fixed_clock,
                       poll_interval=0.02)
    async with running.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        for _ in range(10):
            await pilot.pause(0.02)
        findings = running.screen.query_one(FindingsList)
        assert findings.has_focus or findings.max_scroll_y > 0
        for presses in range(1, 6):
            await pilot.press("down")
            for _ in range(5):
                await pilot.pause(0.03)  # polls come and rebuild the cards meanwhile
            assert findings.scroll_y == presses, (presses, findings.scroll_y)
        assert feed.calls > 10


def test_evidence_reads_as_sentences() -> None:
    evidence = json.loads(REPORT.read_text())["findings"][0]["evidence"]
    lines = evidence_sentences(evidence)
    assert lines[0] == ("The ranks' paths parted at lockjob.py:6 `if rank == 1 and step == 8:`: "
                        "`rank == 1 and step == 8` (rank = dist.get_rank()), decided by its "
                        "rank.")
    text = "\n".join(lines)
    assert "null" not in text and "None" not in text and '{"' not in text
    assert "Waiting: rank 0: all_reduce." in lines
    when = evidence_sentences({"since": 1796638700.5, "t_ns": 1796638700500000000,
                               "seq": 1796638700})
    assert when == [f"Since: {clock(1796638700.5)}.", f"T ns: {clock(1796638700.5)}.",
                    "Seq: 1796638700."]
    assert clock(0.25) == "00:00:00.250 UTC"
