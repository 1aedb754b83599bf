"""Work that several tests check, done once per test session: each catalogued bug's run
(and its fixed twin's) under `ddpdoctor run`, a detector job's run, a framework job's plain
run; shared by every test and every xdist worker under a lock."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Callable

import pytest

from ddpdoctor import bugs
from tests.conftest import DoctorRun, run_doctor, warm_launch

SAMPLE_BUGS = bugs.sample_bugs_dir()


def session_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this session sees: xdist gives each worker its own
    basetemp (``pytest-N/popen-gwK``) under one per-session directory."""
    base = factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def once(factory: pytest.TempPathFactory, key: str, make: Callable[[Path], None]) -> Path:
    """The session's directory for ``key``, filled by ``make`` the first time it is asked
    for, while its lock is held; later askers wait for it.  A ``make`` that raised left no
    mark, so the next asker tries again (and fails as it did)."""
    where = session_dir(factory) / "shared" / key
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "done").exists():
            make(where)
            (where / "done").touch()
    return where


def shared_run(factory: pytest.TempPathFactory, key: str, args: list[str],
               cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 300) -> DoctorRun:
    """The session's one ``ddpdoctor ARGS`` run under ``key`` (its run dir, exit status and
    output kept for every later asker)."""
    def make(where: Path) -> None:
        run = run_doctor(args, where, env=env, cwd=cwd, timeout=timeout)
        (where / "result.json").write_text(json.dumps(
            {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}))

    where = once(factory, key, make)
    done = json.loads((where / "result.json").read_text())
    return DoctorRun(done["returncode"], done["stdout"], done["stderr"], where / "run")


def suite_command(bug: bugs.Bug, fixed: bool) -> list[str]:
    """The bug's command as the suite runs it: a job torchrun would start gets its ranks
    forked by the suite's launcher (``warm_launch``); a script that spawns its own ranks
    runs as the catalogue says.  The catalogue's launch forms run on torchrun in
    test_run.py and, bug by bug, in the ``--ddp torch`` runs of test_sample_bugs.py."""
    if bug.launch == bugs.Launch.SPAWN:
        return bugs.job_command(bug, fixed)
    return warm_launch(bug.nproc, bug.fixed_script if fixed else bug.script)


def sample_run(factory: pytest.TempPathFactory, bug: bugs.Bug, fixed: bool) -> DoctorRun:
    """The session's one run of ``bug`` (or its twin) under ``ddpdoctor run``."""
    args = ["run", "--hang-timeout", str(bug.hang_timeout), *suite_command(bug, fixed)]
    return shared_run(factory, f"{bug.name}{'-fixed' if fixed else ''}", args, cwd=SAMPLE_BUGS)
