"""Stop means stopped: on every way a run ends, no process of the job outlives it.

Each job has, per rank, a DataLoader worker and a `sleep 3600` grandchild; the job writes their
pids, and afterwards each of them must be gone (read from /proc, never searched by name).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .helpers import (JOBS, job_pids, kill_leftovers, rank_headers, read_report, run_args,
                      run_doctor, start_doctor, wait_until)

pytestmark = pytest.mark.slow

TREE_JOB = JOBS / "tree_job.py"


def _recorded_pids(pid_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in pid_dir.glob("*.pid") if p.read_text()}


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _assert_tree_gone(run_dir: Path, pid_dir: Path, expect: tuple[str, ...]) -> None:
    pids = _recorded_pids(pid_dir)
    for what in expect:
        assert what in pids, f"the job did not record {what}: {pids}"
    try:
        left = {k: p for k, p in pids.items() if _running(p)}
        assert not left, f"processes of the job still alive: {left}"
        assert not job_pids(run_dir), f"processes of the run left behind: {job_pids(run_dir)}"
    finally:
        kill_leftovers(run_dir)


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    path = tmp_path / "pids"
    path.mkdir()
    return path


def _env(pid_dir: Path, mode: str, **extra: str) -> dict[str, str]:
    return {"PID_DIR": str(pid_dir), "MODE": mode, **extra}


EVERY = ("rank-0", "rank-1", "worker-0", "worker-1", "grandchild-0", "grandchild-1")


def test_hang_verdict_stops_every_process(run_dir, pid_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", "5"), str(TREE_JOB)],
                     env=_env(pid_dir, "hang"))
    assert run.returncode == 124, run.stderr[-3000:]
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "hung"
    assert report["live"] is False
    stopped = report["stopped"]
    assert stopped["signal"] == "SIGTERM"
    pids = _recorded_pids(pid_dir)
    assert {pids["worker-1"], pids["grandchild-0"], pids["rank-0"]} <= set(stopped["pids"])
    _assert_tree_gone(run_dir, pid_dir, EVERY)


def test_ctrl_c_stops_every_process(run_dir, pid_dir):
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "60"), str(TREE_JOB)],
                        env=_env(pid_dir, "long"))
    try:
        assert wait_until(lambda: len(_recorded_pids(pid_dir)) == 6 and
                          min((h.count for h in rank_headers(run_dir).values()),
                              default=0) > 5, 90)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    report = read_report(run_dir / "report.json")
    assert report["live"] is False and report["outcome"] != "completed"
    assert report["stopped"]["signal"] == "SIGINT"
    _assert_tree_gone(run_dir, pid_dir, EVERY)


def test_rank_crash_keeps_the_jobs_failure_and_stops_the_rest(run_dir, pid_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", "30"), str(TREE_JOB)],
                     env=_env(pid_dir, "crash"))
    assert run.returncode == 1, run.stderr[-3000:]  # torchrun's own status for a failed rank
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "failed" and report["exit_code"] == 1
    assert report["live"] is False
    assert any(f["kind"] == "rank_failed" and 1 in f["ranks"] for f in report["findings"])
    pids = _recorded_pids(pid_dir)
    assert report["stopped"]["reason"] == "leftovers"  # the ranks' `sleep` children
    # torchrun ends the ranks (their process groups); the `sleep`s, in sessions of their
    # own, outlive them and are stopped by ddpdoctor
    assert {pids["grandchild-0"], pids["grandchild-1"]} <= set(report["stopped"]["pids"])
    _assert_tree_gone(run_dir, pid_dir, EVERY)


def test_job_that_aborts_itself_is_failed_not_hung(run_dir, pid_dir):
    # rank 0 waits in an all_reduce rank 1 never enters, and rank 1 dies by SIGABRT: the
    # job ends itself, so its own failure and status stand, whatever verdict was near
    run = run_doctor([*run_args(run_dir, "--hang-timeout", "3"), str(TREE_JOB)],
                     env=_env(pid_dir, "abort"))
    assert run.returncode not in (0, 124), run.stderr[-3000:]
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "failed", report["findings"]
    assert report["exit_code"] == run.returncode
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[1]["exit_code"] == -signal.SIGABRT
    _assert_tree_gone(run_dir, pid_dir, EVERY)


def test_supervisor_sigkilled_then_the_job_hangs_ends_the_job(run_dir, pid_dir):
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "6"), str(TREE_JOB)],
                        env=_env(pid_dir, "hang_later", STEPS="400"))
    try:
        assert wait_until(lambda: len(_recorded_pids(pid_dir)) == 6 and
                          min((h.count for h in rank_headers(run_dir).values()),
                              default=0) > 5, 90)
        proc.kill()  # ddpdoctor is gone; the job trains on, then hangs unsupervised
        _, stderr = proc.communicate(timeout=240)  # EOF once every process of the job is gone
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "the job made no progress for 6 s: ending the job" in stderr, stderr[-3000:]
    assert wait_until(lambda: not job_pids(run_dir), 30)
    _assert_tree_gone(run_dir, pid_dir, EVERY)
    assert min(h.count for h in rank_headers(run_dir).values()) > 100  # it trained on
    run = run_doctor(["analyze", str(run_dir), "--json"])
    report = read_report(run_dir / "report.analyzed.json")
    assert report["outcome"] != "completed", run.stderr[-3000:]
