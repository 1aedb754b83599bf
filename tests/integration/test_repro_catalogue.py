"""The repro of every catalogued bug's run gives the bug's first error finding; the repro of
every fixed twin ends cleanly.  The bug runs are test_sample_bugs.py's own: each of its
tests calls ``check_repro`` on the run it made (no bug is run twice).  The twins' repros
are replayed together, one job per rank count (``replay_twins``): each still runs
as its own process group, on a store prefix of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddpdoctor import bugs
from ddpdoctor.repro.command import write_repro
from ddpdoctor.repro.header import replay_args
from tests.conftest import JOBS, WARM_TORCHRUN, warmed
from tests.integration.sample_runs import once, sample_run

MAX_LINES = 200
SLACK_SECONDS = 90  # beyond the hang timeout: the goal is ~10 s, the rest is room for load


def first_error(report: dict[str, Any]) -> tuple[str, list[int], int | None] | None:
    """(kind, ranks, seq) of a report's first error finding, None when it has none."""
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    return (errors[0]["kind"], sorted(errors[0]["ranks"]), errors[0]["seq"]) if errors else None


def run_repro(bug: bugs.Bug, run_dir: Path, where: Path) -> tuple[subprocess.CompletedProcess,
                                                                    dict[str, Any], int, float]:
    """Write the repro of ``run_dir`` and run it under ddpdoctor: (process, report, lines,
    seconds)."""
    where.mkdir(parents=True, exist_ok=True)
    script = write_repro(run_dir, where / "repro.py")
    lines = script.read_text().count("\n")
    start = time.monotonic()
    args = replay_args(script.read_text())  # the command the header tells the user to run
    assert args, "the repro's header gives no `Replay: ddpdoctor run ...` line"
    assert args[-1] == script.name and "--nproc-per-node" in args, args
    proc = subprocess.run(  # its ranks forked by the suite's launcher
        [sys.executable, "-m", "ddpdoctor.cli",
         *warmed(["run", "--run-dir", str(where / "run"), *args[:-1], str(script)])],
        cwd=where, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    return proc, json.loads((where / "run" / "report.json").read_text()), lines, seconds


def check_repro(bug: bugs.Bug, run_dir: Path, where: Path) -> None:
    """The repro of the bug's run in ``run_dir``: under 200 lines; the same first error
    finding (kind, ranks, seq) as the run (a bug with a ``replay_gap``: known to differ, and
    the check says when it no longer does)."""
    original = json.loads((run_dir / "report.json").read_text())
    proc, report, lines, seconds = run_repro(bug, run_dir, where)
    name = f"{bug.name} repro"
    assert lines < MAX_LINES, f"{name}: {lines} lines"
    assert seconds < bug.hang_timeout + SLACK_SECONDS, f"{name}: ran {seconds:.0f} s"
    if bug.replay_gap:  # what its finding rests on is not replayed (the catalogue says why)
        assert first_error(report) != first_error(original), (
            f"{name}: the replay now gives the bug's first finding: drop its replay_gap")
    else:
        assert first_error(report) == first_error(original), (
            f"{name}: first error {first_error(report)}, the bug's {first_error(original)}\n"
            f"{(where / 'repro.py').read_text()}")


def twin_repro(factory: pytest.TempPathFactory, bug: bugs.Bug) -> Path:
    """The repro of the session's run of ``bug``'s fixed twin (written once, under 200 lines,
    its header telling how to replay it)."""
    run = sample_run(factory, bug, fixed=True)

    def make(where: Path) -> None:
        script = write_repro(run.run_dir, where / "repro.py")
        text = script.read_text()
        lines = text.count("\n")
        assert lines < MAX_LINES, f"{bug.name} fixed repro: {lines} lines"
        args = replay_args(text)
        assert args and args[args.index("--nproc-per-node") + 1] == str(bug.nproc), args

    return once(factory, f"{bug.name}-fixed-repro", make) / "repro.py"


def replay_twins(factory: pytest.TempPathFactory, twins: list[bugs.Bug], nproc: int,
                 where: Path) -> subprocess.CompletedProcess:
    """Every twin's repro replayed in turn by one job of ``nproc`` ranks
    (tests/integration/jobs/replay_batch.py, started as torchrun would by the suite's
    launcher): one job instead of one per twin."""
    scripts = [str(twin_repro(factory, bug)) for bug in twins]
    proc = subprocess.Popen(
        [sys.executable, "-u", str(WARM_TORCHRUN), "--nproc-per-node", str(nproc),
         str(JOBS / "replay_batch.py"), *scripts],
        cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60 + 5 * len(scripts))
    finally:  # a hung replay (or the test's own timeout): no rank may outlive the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
