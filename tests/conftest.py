"""Shared fixtures: run `ddpdoctor` as a user would, and read what it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "integration" / "jobs"
WARM_TORCHRUN = JOBS / "warm_torchrun.py"


def pytest_configure(config: pytest.Config) -> None:
    """The Ctrl-C a test sends must reach ddpdoctor as a terminal's does.  A shell that
    starts pytest in the background (``pytest ... &``, as CI scripts may) leaves SIGINT
    ignored, an ignored signal stays ignored across exec, and Python then never raises
    KeyboardInterrupt: a handler here makes every job this process starts begin with the
    default (handlers, unlike ignores, are reset at exec)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def default_signals() -> None:
    """For ``preexec_fn``: a child a test will signal starts with the default disposition
    of the signals that end a run, whatever this process inherited (`nohup` leaves SIGHUP
    ignored, a scheduler may leave SIGTERM ignored, and an ignored signal stays ignored
    across exec, as ddpdoctor rightly keeps it)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@dataclass
class DoctorRun:
    """One finished `ddpdoctor run` (or other command) and its run dir."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "report.json").read_text())

    def findings(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.report["findings"] if f["kind"] == kind]

    def supervisor_events(self, event: str) -> list[dict[str, Any]]:
        path = self.run_dir / "supervisor.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in lines if e.get("event") == event]


def warm_launch(nproc: int, script: str | Path, *args: str) -> list[str]:
    """``ddpdoctor run``'s user command for a one-node job whose ranks the suite's launcher
    forks from a process that imported torch (its docstring says what that does not
    exercise): for the many jobs that test a diagnosis, not a launch form."""
    return ["--", sys.executable, "-u", str(WARM_TORCHRUN), "--nproc-per-node", str(nproc),
            str(script), *args]


def warmed(args: list[str]) -> list[str]:
    """``ddpdoctor run`` ARGS of the script form (``... --nproc-per-node N script.py ...``,
    the script right after N) with the ranks started by ``warm_launch`` instead."""
    at = args.index("--nproc-per-node")
    return [*args[:at], *warm_launch(int(args[at + 1]), *args[at + 2:])]


def run_doctor(args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
               timeout: float = 240, cwd: Path | None = None) -> DoctorRun:
    """`python -m ddpdoctor.cli ARGS` with a run dir under tmp_path (unless args give one)."""
    run_dir = tmp_path / "run"
    full = list(args)
    if full and full[0] == "run" and "--run-dir" not in full:
        full[1:1] = ["--run-dir", str(run_dir)]
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", *full],
                          env={**os.environ, **(env or {})}, cwd=cwd or tmp_path,
                          capture_output=True, text=True, timeout=timeout)
    return DoctorRun(proc.returncode, proc.stdout, proc.stderr, run_dir)


@pytest.fixture
def doctor(tmp_path: Path):
    def _run(args: list[str], env: dict[str, str] | None = None, **kw: Any) -> DoctorRun:
        return run_doctor(args, tmp_path, env, **kw)

    return _run


_RERUN_REASONS: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep why a test failed before its rerun (the rerun's pass would hide it).  No test
    is rerun by default; only a test marked ``flaky`` for a race inside torch itself is."""
    if report.outcome == "rerun":
        _RERUN_REASONS.append((report.nodeid, report.longreprtext[-4000:]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print each rerun test's first failure, so that a flaky test leaves its cause in the
    CI log."""
    for nodeid, text in _RERUN_REASONS:
        terminalreporter.write_sep("-", f"first failure of {nodeid} (rerun)")
        terminalreporter.write_line(text)
