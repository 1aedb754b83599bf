"""Each catalogued bug's run (and its fixed twin's) under `ddpdoctor run`, made once per test
session and shared by every test and every xdist worker that checks it."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from ddpdoctor import bugs
from tests.conftest import DoctorRun, run_doctor

SAMPLE_BUGS = bugs.sample_bugs_dir()


def session_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this session sees: xdist gives each worker its own
    basetemp (``pytest-N/popen-gwK``) under one per-session directory."""
    base = factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def sample_run(factory: pytest.TempPathFactory, bug: bugs.Bug, fixed: bool) -> DoctorRun:
    """The session's one run of ``bug`` (or its twin): the first test to ask makes it, while
    holding the run's lock; the others wait for it and read what it left."""
    where = session_dir(factory) / "sample-runs" / f"{bug.name}{'-fixed' if fixed else ''}"
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = where / "result.json"
        if result.exists():
            done = json.loads(result.read_text())
            return DoctorRun(done["returncode"], done["stdout"], done["stderr"], where / "run")
        args = ["run", "--hang-timeout", str(bug.hang_timeout), *bugs.job_command(bug, fixed)]
        run = run_doctor(args, where, cwd=SAMPLE_BUGS, timeout=300)
        result.write_text(json.dumps({"returncode": run.returncode, "stdout": run.stdout,
                                      "stderr": run.stderr}))
        return run

