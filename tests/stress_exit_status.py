"""Is the exit status of a job whose rank fails its own, every time (not 124)?  Runs
tests/integration/jobs/rank_fails.py (the last rank works a while, the others waiting,
then raises) under a launcher that polls once a second as DeepSpeed's does
(jobs/polling_launcher.py), with a short hang timeout, N times, a few at a time, and
checks each run: exit status 1 (the job's own), outcome failed.  Issue #56: ddpdoctor's
stacks after a verdict took the launcher's time to end the job, and a run exited 124.

    python -m tests.stress_exit_status                  # 12 runs, 2 at a time
    python -m tests.stress_exit_status --runs 6 --nproc 4

Prints one line a run, then the count; exits 1 when a run's status was not the job's.
Not part of the suite; tests/integration/test_output.py keeps one run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.conftest import JOBS, run_doctor
from tests.stress import run_many


def one_run(where: Path, port: int, nproc: int) -> tuple[int, str]:
    """(exit status, outcome) of one run in ``where``."""
    run = run_doctor(["run", "--hang-timeout", "2", "--", sys.executable,
                      str(JOBS / "polling_launcher.py"), str(JOBS / "rank_fails.py")], where,
                     env={"MASTER_PORT": str(port), "NPROC": str(nproc)}, timeout=300)
    try:
        report = json.loads((run.run_dir / "report.json").read_text())
    except (OSError, ValueError):
        return run.returncode, "no report"
    return run.returncode, str(report.get("outcome"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    ap.add_argument("--nproc", type=int, default=2, help="ranks a run")
    a = ap.parse_args(argv)
    bad, base = run_many(lambda i, where: one_run(where, 29600 + i, a.nproc),
                         lambda got: got == (1, "failed"), a.runs, a.jobs, "ddpdoctor-exit-")
    print(f"{a.runs - bad} of {a.runs} runs exited with the job's status; runs in {base}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
