"""The fault matrix: real gloo ranks under `ddpdoctor run` while things break around them.

In every row a report (or a one-line error) comes out, nothing recorded before the fault is
lost, and no process of the run is left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from .helpers import (COLLECTIVES, TRAIN, job_pids, kill_leftovers, rank_headers,
                      read_report, run_args, run_doctor, start_doctor, wait_until)

pytestmark = pytest.mark.slow

HANG = "5"
STEPS = 12


def _ranks(report: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in report["ranks"]}


def _errors(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] == "error"]


def _assert_no_orphans(run_dir: Path) -> None:
    assert wait_until(lambda: not job_pids(run_dir), 10), \
        f"processes of the run left behind: {job_pids(run_dir)}"


def test_rank_sigkilled_inside_a_collective(run_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(TRAIN)],
                     env={"MODE": "kill_in_collective"})
    assert run.returncode != 0
    report = read_report(run_dir / "report.json")
    assert report["outcome"] in ("failed", "hung")
    ranks = _ranks(report)
    assert ranks[1]["exit_code"] == -9 and ranks[1]["state"] == "killed"
    assert ranks[1]["current"] is not None and ranks[1]["current"]["op"] == "all_reduce"
    [failed] = [f for f in report["findings"] if f["kind"] == "rank_failed"]
    assert failed["ranks"] == [1] and "SIGKILL" in failed["summary"]
    # the healthy rank 0 is never blamed for the dead rank's open call
    assert not [f for f in report["findings"] if f["severity"] == "error" and
                f["kind"] != "rank_failed" and 0 in f["ranks"]], report["findings"]
    # everything before the kill is there: 4 steps (1 bucket each) + the pid exchange
    assert ranks[0]["last_seq"] >= 4 and ranks[1]["last_seq"] >= 5
    _assert_no_orphans(run_dir)


def test_rank_aborted_by_gloo_on_a_size_mismatch(run_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(COLLECTIVES)],
                     env={"BUG": "shape"})
    assert run.returncode != 0
    report = read_report(run_dir / "report.json")
    [mismatch] = [f for f in report["findings"] if f["kind"] == "collective_mismatch"]
    assert mismatch["seq"] == 6 and 1 in mismatch["ranks"]
    assert mismatch["evidence"]["calls"]["1"]["shapes"] == [[11]]
    assert all(r["last_seq"] is not None and r["last_seq"] >= 5 for r in report["ranks"])
    _assert_no_orphans(run_dir)


def test_rank_frozen_with_sigstop(run_dir):
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(TRAIN)],
                     env={"MODE": "sigstop"})
    assert run.returncode == 124, run.stderr[-3000:]
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "hung"
    stopped = _ranks(report)[1]
    assert stopped["state"] == "stopped"
    assert stopped["stack"], f"py-spy gave no stack of the stopped rank: {stopped}"
    assert any(f.get("filename", "").endswith("train.py") for f in stopped["stack"])
    [missing] = [f for f in report["findings"] if f["kind"] == "missing_collective"]
    assert missing["ranks"] == [1]
    assert "stopped" in missing["detail"]
    _assert_no_orphans(run_dir)


def test_exception_inside_ddpdoctor_runtime_leaves_the_job_alone(run_dir, tmp_path):
    out = tmp_path / "params"
    out.mkdir()
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG, "--ddp", "torch"),
                      str(TRAIN)],
                     env={"DDPDOCTOR_TEST_FAULT": "begin:5@1", "OUT_DIR": str(out)})
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        assert f"JOB|rank {rank} step {STEPS - 1} loss" in run.stdout
        assert f"JOB|rank {rank} done" in run.stdout
        assert (out / f"params-rank{rank}.npy").is_file()
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "completed"
    assert not _errors(report), _errors(report)
    problem = [p for p in report["problems"] if "runtime failed" in p]
    assert problem and "rank 1" in problem[0] and "begin" in problem[0], report["problems"]
    ranks = _ranks(report)
    assert ranks[1]["state"] == "exited"  # not taken for a killed rank
    # what came before is kept; torch's flight recorder (--ddp torch) may fill in the rest
    assert ranks[0]["last_seq"] >= ranks[1]["last_seq"] >= 3


def test_supervisor_sigkilled_job_finishes_and_analyze_rebuilds(run_dir, tmp_path):
    out = tmp_path / "params"
    out.mkdir()
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "30"), str(TRAIN)],
                        env={"STEPS": "40", "STEP_SLEEP": "0.1", "OUT_DIR": str(out)})
    try:
        assert wait_until(lambda: len(rank_headers(run_dir)) == 2 and
                          min(h.count for h in rank_headers(run_dir).values()) > 3, 60)
        proc.kill()
        stdout, _ = proc.communicate(timeout=120)  # EOF once every rank has exited
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not job_pids(run_dir), 60)
    for rank in (0, 1):
        assert f"JOB|rank {rank} done" in stdout
        assert (out / f"params-rank{rank}.npy").is_file()
    run = run_doctor(["analyze", str(run_dir), "--json"])
    assert run.returncode == 0, run.stderr[-3000:]
    report = read_report(run_dir / "report.analyzed.json")
    assert report["outcome"] == "completed", report["findings"]
    assert not _errors(report)
    assert {r["rank"]: r["state"] for r in report["ranks"]} == {0: "exited", 1: "exited"}
    assert all(r["last_seq"] >= 40 for r in report["ranks"])


def _fake_py_spy(tmp_path: Path) -> str:
    """A py-spy that fails the way a denied ptrace does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\n"
                    "echo 'Permission Denied: Try running again with elevated permissions' "
                    ">&2\nexit 1\n")
    fake.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("how", ["missing", "ptrace_denied"])
def test_no_stacks_without_py_spy(run_dir, tmp_path, how):
    path = "/usr/local/bin:/usr/bin:/bin"
    if how == "ptrace_denied":
        path = _fake_py_spy(tmp_path) + os.pathsep + path
        chosen = str(Path(path.split(os.pathsep)[0]) / "py-spy")
    else:
        assert shutil.which("py-spy", path=path) is None
        chosen = ""  # none: the one installed beside the interpreter is not taken either
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(COLLECTIVES)],
                     env={"BUG": "op", "PATH": path, "DDPDOCTOR_PY_SPY": chosen})
    assert run.returncode == 124, run.stderr[-3000:]
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "hung"
    for r in report["ranks"]:
        assert r["stack"] is None
        expected = "not installed" if how == "missing" else "ptrace denied"
        assert expected in (r["stack_error"] or ""), r
    assert [f["kind"] for f in _errors(report)] == ["collective_mismatch"]
    _assert_no_orphans(run_dir)


@pytest.fixture
def small_fs(tmp_path: Path):
    """Mount a tmpfs at tmp_path/fs (root only); the test passes its size and options."""
    mounts: list[Path] = []

    def mount(size: str, ro: bool = False) -> Path:
        path = tmp_path / f"fs{len(mounts)}"
        path.mkdir()
        opts = f"size={size}" + (",ro" if ro else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"cannot mount a tmpfs (needs root): {done.stderr.strip()}"
        mounts.append(path)
        return path

    yield mount
    for path in mounts:
        kill_leftovers(path / "run")
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_run_dir_full_from_the_start(small_fs):
    fs = small_fs("64k")
    run_dir = fs / "run"
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(TRAIN)])
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        assert f"JOB|rank {rank} done" in run.stdout  # the job did not notice
    assert "cannot record" in run.stderr
    # the summary says why the report has no rank: not "the job never called init"
    said = run.stdout + run.stderr  # the summary on stdout, the notices on stderr
    assert "is full" in said and "never called" not in said, said[-3000:]
    assert "(no rank recorded)" in run.stdout
    report_path = run_dir / "report.json"
    if report_path.exists():
        report = read_report(report_path)
        assert report["outcome"] == "completed"
        assert any("could not record" in n for n in report["notes"]), report["notes"]
    else:
        assert "cannot write the report" in run.stderr
    _assert_no_orphans(run_dir)


def test_run_dir_fills_up_during_the_run(small_fs):
    """The job fills the disk half-way; the ranks' traces, which take their disk as they
    grow, then find none: each rank stops recording, says so once, and trains on."""
    steps = 400  # past the first chunk of each rank's trace
    fs = small_fs("20m")
    run_dir = fs / "run"
    filler = fs / "filler"
    run = run_doctor([*run_args(run_dir, "--hang-timeout", HANG), str(TRAIN)],
                     env={"MODE": "fill_disk", "FILL_PATH": str(filler), "STEPS": str(steps)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "JOB|disk full" in run.stderr
    for rank in (0, 1):
        assert f"JOB|rank {rank} step {steps - 1} loss" in run.stdout
        assert f"JOB|rank {rank} done" in run.stdout
        assert run.stderr.count(f"ddpdoctor: notice: rank {rank}: no disk left for the "
                                "trace") == 1, run.stderr[-3000:]
    report_path = run_dir / "report.json"
    if report_path.exists():  # written before the job filled the disk, or after it freed
        assert read_report(report_path)["outcome"] == "completed"
    else:
        assert "cannot write the report" in run.stderr
    filler.unlink()  # room again: everything recorded is still there
    analyzed = run_doctor(["analyze", str(run_dir)])
    assert analyzed.returncode == 0, analyzed.stderr[-3000:]
    report = read_report(run_dir / "report.analyzed.json")
    assert report["outcome"] == "completed" and not _errors(report), report["findings"]
    assert all(r["last_seq"] >= steps // 2 for r in report["ranks"])  # all before the fill
    _assert_no_orphans(run_dir)


def test_read_only_run_dir_is_a_clear_error(small_fs):
    fs = small_fs("64k", ro=True)
    run = run_doctor([*run_args(fs / "run"), str(TRAIN)])
    assert run.returncode == 2
    [line] = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert line.startswith("ddpdoctor: cannot write the run dir") and "--run-dir" in line
    assert "JOB|" not in run.stdout  # nothing was started


def test_ctrl_c_stops_every_rank_and_writes_the_report(run_dir):
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "30"), str(TRAIN)],
                        env={"MODE": "long", "SECONDS": "120", "STEP_SLEEP": "0.05"})
    try:
        assert wait_until(lambda: len(rank_headers(run_dir)) == 2 and
                          min(h.count for h in rank_headers(run_dir).values()) > 5, 60)
        before = {r: h.last_seq for r, h in rank_headers(run_dir).items()}
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert not job_pids(run_dir), f"orphans: {job_pids(run_dir)}"
    report = read_report(run_dir / "report.json")
    assert "interrupted by the user" in report.get("notes", [])
    assert report["outcome"] != "completed"
    ranks = _ranks(report)
    assert set(ranks) == {0, 1}
    assert all(ranks[r]["last_seq"] >= before[r] for r in before)


def test_second_ctrl_c_is_not_a_traceback(run_dir):
    """Impatient users press Ctrl-C twice: still a report, still no orphan."""
    proc = start_doctor([*run_args(run_dir, "--hang-timeout", "30"), str(TRAIN)],
                        env={"MODE": "long", "SECONDS": "120", "STEP_SLEEP": "0.05"})
    try:
        assert wait_until(lambda: len(rank_headers(run_dir)) == 2 and
                          min(h.count for h in rank_headers(run_dir).values()) > 5, 60)
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: (run_dir / "report.json").exists(), 10, 0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    own = [ln for ln in stderr.splitlines() if not ln.startswith("[rank")]  # not the ranks'
    assert not any(re.search(r'File ".*/ddpdoctor/', ln) for ln in own), stderr[-3000:]
    assert wait_until(lambda: not job_pids(run_dir), 15), f"orphans: {job_pids(run_dir)}"
    assert json.loads((run_dir / "report.json").read_text())["schema"]
