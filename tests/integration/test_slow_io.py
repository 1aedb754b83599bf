"""A rank writing a checkpoint slowly (I/O-bound, little CPU, no trace records) for longer
than the hang timeout while its peer waits is a straggler, not a hang: the job is not stopped."""

from __future__ import annotations

import json

import pytest

from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow
HANG_TIMEOUT = 3
WRITE_S = 9  # three hang timeouts of slow writes


def test_a_rank_writing_slowly_is_not_stopped(doctor, tmp_path):
    run = doctor(warmed(["run", "--hang-timeout", str(HANG_TIMEOUT), "--nproc-per-node", "2",
                         str(JOBS / "slow_checkpoint.py")]),
                 env={"CKPT_DIR": str(tmp_path), "WRITE_S": str(WRITE_S)})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["outcome"] == "completed"
    assert "stopped" not in report
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert (tmp_path / "ckpt.bin").stat().st_size >= (64 << 10) * 20  # it did write slowly


def test_a_rank_retrying_then_waiting_on_an_upload_is_not_stopped(doctor, tmp_path):
    """Waits the program chose (a retry loop of short sleeps, then an upload command whose
    output it reads), each three hang timeouts long: slow, not hung."""
    run = doctor(warmed(["run", "--hang-timeout", str(HANG_TIMEOUT), "--nproc-per-node", "2",
                         str(JOBS / "slow_checkpoint.py")]),
                 env={"CKPT_DIR": str(tmp_path), "WRITE_S": str(WRITE_S), "HOW": "waits"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["outcome"] == "completed" and "stopped" not in report
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert "a straggler so far" in run.stdout + run.stderr  # said, once
