"""Does a restarted job's report list every attempt, every time?  Runs the job of
tests/integration/jobs/restart_once.py (rank 1 fails in attempt 0, attempt 1 completes)
under ``ddpdoctor run -- torchrun --max-restarts 1`` N times, a few at a time, and checks
each run: exit status 0, outcome completed, and ``attempts`` = [0 failed, 1 completed] (an
attempt that began and ended between two of the supervisor's looks, e.g. while it took a
failed attempt's stacks, was lost: issue #56).

    python -m tests.stress_restarts                # 20 runs, 2 at a time
    python -m tests.stress_restarts --runs 6 --jobs 1

Prints one line a run, then the count; exits 1 when a run lost an attempt.  Not part of
the suite (about 20 s a run); the suite keeps one run of the job (test_restarts.py), which
also replays the race itself: the supervisor looking for the first time once the job has
ended."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from tests.conftest import JOBS, run_doctor
from tests.stress import run_many

EXPECTED = [(0, "failed"), (1, "completed")]


def torchrun() -> list[str]:
    launcher = shutil.which("torchrun")
    return [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]


def one_run(where: Path) -> tuple[int, str, list[tuple[int, str]]]:
    """(exit status, outcome, [(attempt, outcome)]) of one run in ``where``."""
    run = run_doctor(["run", "--hang-timeout", "60", "--", *torchrun(), "--standalone",
                      "--max-restarts", "1", "--nproc-per-node", "2",
                      str(JOBS / "restart_once.py")], where, timeout=300)
    try:
        top = json.loads((run.run_dir / "report.json").read_text())
    except (OSError, ValueError):
        return run.returncode, "no report", []
    return run.returncode, str(top.get("outcome")), [
        (e.get("attempt"), e.get("outcome")) for e in top.get("attempts") or []]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    a = ap.parse_args(argv)
    bad, base = run_many(lambda _, where: one_run(where),
                         lambda got: got[0] == 0 and got[1] == "completed" and
                         got[2] == EXPECTED, a.runs, a.jobs, "ddpdoctor-restarts-")
    print(f"{a.runs - bad} of {a.runs} runs listed every attempt; runs in {base}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
