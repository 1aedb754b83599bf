"""A report written while its job ran (live) shows the job finished once the job is gone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ddpdoctor.tui.model import ReportView
from ddpdoctor.tui.source import ReportSource
from ddpdoctor.tui.widgets.run_summary import summary_text


def _report(tmp_path: Path, pid: int, host: str) -> Path:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({
        "schema": "ddpdoctor.report/1", "outcome": "hung", "live": True, "world_size": 1,
        "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:01:00Z",
        "command": ["train.py"],
        "ranks": [{"rank": 0, "host": host, "pid": pid, "state": "in_collective",
                   "current": {"seq": 3, "op": "all_reduce",
                               "since": "2026-01-01T00:00:30Z"}}],
        "findings": []}))
    return path


def _gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_report_of_a_gone_job_shows_finished(tmp_path):
    report = ReportSource(_report(tmp_path, _gone_pid(), socket.gethostname())).poll()
    assert report["live"] is False
    view = ReportView.from_dict(report)
    text = summary_text(view, now=view.ended_at + 3600).plain
    assert "running" not in text and "HUNG" in text
    assert "1m00s" in text and "1h" not in text  # the run's length, not an hour more
    assert view.reference_time(view.ended_at + 3600) == view.ended_at


def test_report_of_a_running_job_stays_live(tmp_path):
    report = ReportSource(_report(tmp_path, os.getpid(), socket.gethostname())).poll()
    assert report["live"] is True
    assert "running" in summary_text(ReportView.from_dict(report), now=0).plain


def test_report_from_another_host_keeps_its_word(tmp_path):
    report = ReportSource(_report(tmp_path, _gone_pid(), "another-host.invalid")).poll()
    assert report["live"] is True
