"""Attempt layout of a restartable job: torchrun's --max-restarts read from argv, attempt
dirs listed in order, the top-level report built from the last attempt's."""

from __future__ import annotations

import sys

import pytest

from ddpdoctor.report.attempts import attempt_entry, describe_attempts, with_attempts
from ddpdoctor.rundir.attempts import attempt_dirs, make_attempt_dir, max_restarts


@pytest.mark.parametrize("argv,expected", [
    (["torchrun", "--max-restarts", "2", "--nproc-per-node", "2", "t.py"], 2),
    (["/usr/bin/torchrun", "--standalone", "--max_restarts=3", "t.py"], 3),
    ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
      "--max-restarts", "1", "t.py"], 1),
    (["torchrun", "--nproc-per-node", "2", "t.py", "--max-restarts", "5"], 0),  # script's
    (["python", "t.py", "--max-restarts", "4"], 0),  # no torchrun: nothing restarts
    (["torchrun", "--max-restarts", "many", "t.py"], 0),
    (["torchrun", "--nproc-per-node", "2", "t.py"], 0),
])
def test_max_restarts_is_torchruns_own_option(argv, expected):
    assert max_restarts(argv) == expected


def test_attempt_dirs_in_numeric_order(tmp_path):
    for k in (10, 2, 0):
        make_attempt_dir(tmp_path, k)
    (tmp_path / "attempt-x").mkdir()
    (tmp_path / "attempt-3").write_text("a file, not an attempt")
    assert [k for k, _ in attempt_dirs(tmp_path)] == [0, 2, 10]
    assert (tmp_path / "attempt-2" / "traces").is_dir()
    assert (tmp_path / "attempt-2").stat().st_mode & 0o777 == 0o700
    assert attempt_dirs(tmp_path / "missing") == []


def test_top_report_is_the_last_attempts_with_every_attempt_listed():
    failed = {"outcome": "failed", "findings": [{"kind": "rank_failed"}]}
    done = {"outcome": "completed", "findings": []}
    entries = [attempt_entry(0, failed, "attempt-0/report.json"),
               attempt_entry(1, done, "attempt-1/report.json")]
    top = with_attempts(done, entries)
    assert top["outcome"] == "completed" and top["findings"] == []
    assert top["attempt"] == 1
    assert top["attempts"] == [
        {"attempt": 0, "outcome": "failed", "report": "attempt-0/report.json"},
        {"attempt": 1, "outcome": "completed", "report": "attempt-1/report.json"}]
    assert "attempts" not in done  # the attempt's own report is left as it was
    assert describe_attempts(entries) == "attempts: 0 failed; 1 completed"


def test_ui_shows_the_attempt_and_follows_the_newest(tmp_path):
    from ddpdoctor.tui.model import ReportView
    from ddpdoctor.tui.source import current_attempt
    from ddpdoctor.tui.widgets.run_summary import summary_text

    assert current_attempt(tmp_path) == tmp_path  # no restarts: the run dir itself
    for k in (0, 1):
        make_attempt_dir(tmp_path, k)
    assert current_attempt(tmp_path) == tmp_path / "attempt-1"
    top = with_attempts({"outcome": "completed", "ranks": [], "findings": [],
                         "run_dir": "/runs/r1/attempt-1"},
                        [attempt_entry(0, {"outcome": "failed"}, "attempt-0/report.json"),
                         attempt_entry(1, {"outcome": "completed"}, "attempt-1/report.json")])
    view = ReportView.from_dict(top)
    assert view.attempt == 1
    assert view.attempts == ((0, "failed", "attempt-0/report.json"),
                             (1, "completed", "attempt-1/report.json"))
    text = summary_text(view, 0.0, 200).plain
    assert "attempt 1: 0 failed 1 completed" in text
    assert "ddpdoctor ui /runs/r1/attempt-0" in text
    assert "attempt" not in summary_text(ReportView.from_dict({"outcome": "completed"}),
                                         0.0).plain
