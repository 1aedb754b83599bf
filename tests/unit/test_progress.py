"""Live progress facts from real processes, and how they reach the report and the model."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.load import _attach_progress
from ddpdoctor.report import schema
from ddpdoctor.supervisor.progress import ProgressTracker, cpu_seconds
from tests.unit.factory import job, rank, rec, steps


def test_a_spinning_process_is_busy_and_a_sleeping_one_is_not() -> None:
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleep = subprocess.Popen(["sleep", "60"])
    try:
        tracker = ProgressTracker()
        deadline = time.monotonic() + 30
        busy_seen = False
        while time.monotonic() < deadline and not busy_seen:
            tracker.sample([(0, spin.pid, 0), (1, sleep.pid, 0)])
            time.sleep(0.6)
            busy_seen = tracker.by_pid[spin.pid].cpu_busy
            assert not tracker.by_pid[sleep.pid].cpu_busy
        assert busy_seen
        event = tracker.event()
        assert event["0"]["cpu_busy"] is True and event["1"]["cpu_busy"] is False
        assert event["0"]["cpu_s"] > 0
    finally:
        spin.kill()
        sleep.kill()
        spin.wait()
        sleep.wait()
    assert cpu_seconds(spin.pid) is None  # reaped: gone


def test_a_new_trace_record_is_progress() -> None:
    tracker = ProgressTracker()
    tracker.sample([(0, 999_999_999, 5)], now_ns=10)
    tracker.sample([(0, 999_999_999, 5)], now_ns=20)
    assert tracker.by_pid[999_999_999].progress_ns == 10
    tracker.sample([(0, 999_999_999, 6)], now_ns=30)
    assert tracker.by_pid[999_999_999].progress_ns == 30


def test_the_progress_event_reaches_the_rank_runs() -> None:
    runs = {0: rank(0), 1: rank(1)}
    _attach_progress(runs, [{"event": "progress", "ranks": {
        "0": {"progress_ns": 5, "cpu_busy": True, "cpu_s": 1.0},
        "1": {"progress_ns": "bad", "cpu_busy": False}}}])
    assert (runs[0].progress_ns, runs[0].cpu_busy) == (5, True)
    assert (runs[1].progress_ns, runs[1].cpu_busy) == (None, False)


def test_the_report_carries_waits_and_caused_by(tmp_path: Path) -> None:
    r0 = rank(0, steps(2) + [rec(2, t=2, dur=None)], step=2)
    r1 = rank(1, steps(2), stack=None)
    j = job([r0, r1])
    d = diagnose(j)
    report = json.loads(json.dumps(schema.build(j, d.findings, "hung", waits=d.waits)))
    assert report["waits"] == [{"rank": 0, "waits_for": [1], "group": "0", "seq": 2,
                                "op": "all_reduce"}]
    assert report["findings"][0]["caused_by"] is None
    assert report["findings"][0]["ranks"] == [1]
