"""--on-hang wait: the report is written while the job keeps running; Ctrl-C then stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.proc.table import scan, with_environ
from tests.conftest import JOBS

pytestmark = pytest.mark.slow


def job_pids(run_dir: Path) -> list[int]:
    """Processes whose environment names this run dir (the job's whole tree)."""
    return sorted(with_environ(scan(), f"DDPDOCTOR_RUN_DIR={run_dir}"))


def test_wait_leaves_the_job_running_then_ctrl_c_stops_all(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(run_dir),
         "--on-hang", "wait", "--hang-timeout", "30", "--nproc-per-node", "2",
         str(JOBS / "collectives.py")],
        env={**os.environ, "BUG": "op"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        report_path = run_dir / "report.json"
        deadline = time.monotonic() + 120
        while not report_path.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        report = json.loads(report_path.read_text())
        assert report["outcome"] == "hung"
        assert report["findings"][0]["kind"] == "collective_mismatch"
        time.sleep(1.0)
        assert proc.poll() is None  # ddpdoctor still waits for the job
        ranks = [r["pid"] for r in report["ranks"]]
        assert all(Path(f"/proc/{pid}").exists() for pid in ranks)  # the ranks still run
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-2000:]
        time.sleep(0.5)
        assert job_pids(run_dir) == []  # no orphan left behind
        final = json.loads(report_path.read_text())
        assert final["outcome"] == "hung"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in job_pids(run_dir):
            os.kill(pid, signal.SIGKILL)
