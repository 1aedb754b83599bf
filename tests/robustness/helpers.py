"""Helpers for the robustness tests: start `ddpdoctor` as a user would, with a free port,
watch its run dir, and find processes it left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ddpdoctor.proc.table import scan, with_environ
from tests.integration.jobs.ports import free_port

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
TRAIN = JOBS / "train.py"
COLLECTIVES = HERE.parents[0] / "integration" / "jobs" / "collectives.py"


def doctor_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddpdoctor.cli", *args]


def run_args(run_dir: Path, *extra: str, nproc: int = 2, port: int | None = None) -> list[str]:
    """`ddpdoctor run` arguments for a script started through torch's launcher."""
    return ["run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
            "--master-port", str(port or free_port()), *extra]


def run_doctor(args: list[str], env: dict[str, str] | None = None, timeout: float = 180,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(doctor_argv(*args), env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def start_doctor(args: list[str], env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(doctor_argv(*args), env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)


def read_report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def job_pids(run_dir: Path) -> list[int]:
    """Processes whose environment names ``run_dir`` as their DDPDOCTOR_RUN_DIR."""
    table = scan()
    return sorted(pid for pid in with_environ(table, f"DDPDOCTOR_RUN_DIR={run_dir}")
                  if table[pid].state != "Z")


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def rank_headers(run_dir: Path) -> dict[int, Any]:
    """Rank -> its trace header, read now."""
    from ddpdoctor.trace.reader import TraceError, read_header

    out = {}
    for path in (run_dir / "traces").glob("pid-*.ring"):
        try:
            with open(path, "rb") as f:
                h = read_header(f.read(4096), path)
        except (OSError, TraceError):
            continue
        if h.rank >= 0:
            out[h.rank] = h
    return out


def kill_leftovers(run_dir: Path) -> None:
    for pid in job_pids(run_dir):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
