"""Live progress facts from real processes, and how they reach the report and the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.load.run_dirs import _attach_progress
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


def test_a_slow_writer_makes_progress_and_a_blocked_process_does_not(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", (
        "import os, time\n"
        f"f = open({str(tmp_path / 'out.bin')!r}, 'wb')\n"
        "chunk = b'x' * (64 << 10)\n"
        "while True:\n"
        "    f.write(chunk); f.flush(); os.fsync(f.fileno()); time.sleep(0.05)\n")])
    sleeper = subprocess.Popen([sys.executable, "-c",  # blocked for good, no timed sleep
                                "import threading; threading.Event().wait()"])
    try:
        time.sleep(1.0)  # both started
        tracker = ProgressTracker()
        ranks = [(0, writer.pid, 0), (1, sleeper.pid, 0)]
        tracker.sample(ranks)
        first = {p: tracker.by_pid[p].progress_ns for p in (writer.pid, sleeper.pid)}
        for _ in range(4):
            time.sleep(0.6)
            tracker.sample(ranks)
        w, s = tracker.by_pid[writer.pid], tracker.by_pid[sleeper.pid]
        assert w.io_busy and not w.cpu_busy and w.progress_ns > first[writer.pid]
        assert not s.io_busy and not s.cpu_busy and s.progress_ns == first[sleeper.pid]
        assert tracker.event()["0"]["io_busy"] is True
    finally:
        for p in (writer, sleeper):
            p.kill()
            p.wait()


def test_a_child_process_writing_is_its_ranks_progress(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', '''\n"
        "import os, time\n"
        f"f = open({str(tmp_path / 'child.bin')!r}, 'wb')\n"
        "while True:\n"
        "    f.write(b\"y\" * (64 << 10)); f.flush(); time.sleep(0.05)\n"
        "'''])\n"
        "child.wait()\n")])  # waits on its child, no timed sleep of its own
    try:
        time.sleep(1.5)
        tracker = ProgressTracker()
        tracker.sample([(0, parent.pid, 0)])
        for _ in range(4):
            time.sleep(0.6)
            tracker.sample([(0, parent.pid, 0)])
        p = tracker.by_pid[parent.pid]
        assert p.children, "the writing child was not found"
        assert p.io_busy and not p.cpu_busy
    finally:
        from ddpdoctor.proc.table import descendants, scan

        for pid in descendants(scan(), [parent.pid]):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def _parent_with_forked_child(child_code: str) -> subprocess.Popen:
    """A process that forks one child running ``child_code`` (a DataLoader worker's shape:
    the same command line) and then waits on it, using no CPU itself."""
    return subprocess.Popen([sys.executable, "-c", (
        "import os, sys, threading, time\n"
        "if os.fork() == 0:\n"
        f"    {child_code}\n"
        "    os._exit(0)\n"
        "os.wait()\n")])


def _tree_looks(parent: subprocess.Popen, looks: int = 3) -> list:
    from ddpdoctor.proc.progress import TreeProgress
    from ddpdoctor.proc.table import descendants, scan

    deadline = time.monotonic() + 20
    while not descendants(scan(), [parent.pid]) and time.monotonic() < deadline:
        time.sleep(0.1)
    tree = TreeProgress(parent.pid)
    tree.set_children(descendants(scan(), [parent.pid]))
    assert tree.children, "the child was not found"
    tree.look(time.time_ns())
    got = []
    for _ in range(looks):
        time.sleep(0.6)
        got.append(tree.look(time.time_ns()))
    return got


def _end(parent: subprocess.Popen) -> None:
    from ddpdoctor.proc.table import descendants, scan

    for pid in descendants(scan(), [parent.pid]):
        os.kill(pid, 9)
    parent.kill()
    parent.wait()


def test_a_worker_in_a_timed_sleep_or_computing_is_its_ranks_progress() -> None:
    from ddpdoctor.proc.progress import made_progress

    sleeper = _parent_with_forked_child("time.sleep(60)")
    spinner = _parent_with_forked_child("while True: pass")
    try:
        slept, spun = _tree_looks(sleeper), _tree_looks(spinner)
        assert all(made_progress(look) and look.timed_sleep for look in slept)
        assert not any(look.cpu_busy for look in slept)  # the rank itself only waits
        assert any(made_progress(look) and look.children_cpu_s > 0 for look in spun)
    finally:
        _end(sleeper)
        _end(spinner)


def test_a_worker_blocked_on_a_lock_is_no_progress() -> None:
    """A worker stuck for good (a lock, an event never set) is what a hang looks like."""
    from ddpdoctor.proc.progress import made_progress

    stuck = _parent_with_forked_child("threading.Event().wait()")
    try:
        assert not any(made_progress(look) for look in _tree_looks(stuck))
    finally:
        _end(stuck)


def _one_look(proc: subprocess.Popen, gap_s: float = 1.2) -> "object":
    from ddpdoctor.proc.progress import TreeProgress
    from ddpdoctor.proc.table import descendants, scan

    tree = TreeProgress(proc.pid)
    tree.set_children(descendants(scan(), [proc.pid]))
    tree.look(time.time_ns())
    time.sleep(gap_s / 2)
    tree.look(time.time_ns())  # the sleep's switches are seen from here
    time.sleep(gap_s / 2)
    return tree.look(time.time_ns())


def test_a_bounded_wait_is_progress_and_a_stuck_one_is_not() -> None:
    """Slow is not hung: the rank retrying in timed sleeps (around a slow save), or a command
    it waits on sleeping (an upload's stand-in), is the program's chosen wait.  One sleep
    with no wake-up, or a background child sleeping while the rank is blocked elsewhere,
    is not."""
    from ddpdoctor.proc.progress import made_progress

    code = {
        "retries": "import time\nwhile True: time.sleep(0.2)",
        "runs_a_command": "import subprocess; subprocess.run(['sleep', '60'])",
        "runs_and_reads": "import subprocess; subprocess.run(['sleep', '60'], "
                          "capture_output=True)",
        "one_long_sleep": "import time; time.sleep(60)",
        "blocked_beside_a_sleeping_child": (
            "import subprocess, threading; child = subprocess.Popen(['sleep', '60']); "
            "threading.Event().wait()"),
        "polls_beside_a_sleeping_child": (  # a DataLoader's queue wait, a `sleep` beside it
            "import os, select, subprocess; child = subprocess.Popen(['sleep', '60']); "
            "r, w = os.pipe(); select.select([r], [], [])"),
    }
    procs = {k: subprocess.Popen([sys.executable, "-c", c]) for k, c in code.items()}
    try:
        from ddpdoctor.proc.table import descendants, scan

        deadline = time.monotonic() + 30  # every command started, on a loaded machine too
        while time.monotonic() < deadline and not all(
                descendants(scan(), [procs[k].pid]) for k in
                ("runs_a_command", "runs_and_reads", "blocked_beside_a_sleeping_child",
                 "polls_beside_a_sleeping_child")):
            time.sleep(0.2)
        time.sleep(1.0)
        looks = {k: _one_look(p) for k, p in procs.items()}
        progressed = {k for k, look in looks.items() if look is not None and made_progress(look)}
        assert progressed == {"retries", "runs_a_command", "runs_and_reads"}, looks
        assert not any(look.cpu_busy for look in looks.values() if look is not None)
    finally:
        for p in procs.values():
            _end(p)
