"""Runs on disk: `ddpdoctor run --keep N` prunes ./ddpdoctor-runs as a run starts, and
`ddpdoctor runs` lists and prunes it, never touching a live run, a run dir the user named,
a link, or anything outside the folder.  One real run (a job of one process) and the
commands themselves, through a pipe as a user reads them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import JOBS

pytestmark = pytest.mark.slow

DAY = 86400


def _old_run(folder: Path, name: str, days_ago: float, outcome: str = "completed",
             **extra: object) -> Path:
    """A finished run dir as `ddpdoctor run` leaves one (run.json, a trace, a report)."""
    path = folder / name
    (path / "traces").mkdir(parents=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - days_ago * DAY))
    (path / "run.json").write_text(json.dumps({
        "run_id": name, "command": ["train.py", "--lr", "0.1"], "started_at": started,
        **extra}))
    (path / "traces" / "pid-1.ring").write_bytes(b"\0" * 8192)
    (path / "report.json").write_text(json.dumps({"schema": "ddpdoctor.report/1",
                                                  "outcome": outcome}, indent=1))
    return path


def _doctor(cwd: Path, *args: str, shell_tail: str = "") -> subprocess.CompletedProcess:
    """`ddpdoctor ARGS` in ``cwd`` (its default runs folder there), through ``shell_tail``
    (`| head -n 2`) when given."""
    argv = [sys.executable, "-m", "ddpdoctor.cli", *args]
    if shell_tail:
        return subprocess.run(" ".join(map(_quote, argv)) + " " + shell_tail, shell=True,
                              cwd=cwd, capture_output=True, text=True, timeout=240)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def test_run_keeps_the_newest_runs_and_runs_lists_and_prunes_the_rest(tmp_path):
    runs = tmp_path / "ddpdoctor-runs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("not a run")
    _old_run(runs, "20260101-000000-aaaaaa", 30, "hung")
    _old_run(runs, "20260102-000000-bbbbbb", 20, "failed")
    _old_run(runs, "20260103-000000-cccccc", 10)
    _old_run(runs, "mine", 40, named_run_dir=True)  # --run-dir ddpdoctor-runs/mine
    live = _old_run(runs, "20251231-000000-dddddd", 50)
    os.symlink(outside, runs / "20251230-000000-eeeeee")  # a link is never followed
    (live / "report.json").unlink()
    holder = subprocess.Popen(["sleep", "300"],  # a process of the old live run's job
                              env={**os.environ, "DDPDOCTOR_RUN_ID": live.name})
    try:
        run = _doctor(tmp_path, "run", "--keep", "2", "--", sys.executable,
                      str(JOBS / "no_distributed.py"))
        assert run.returncode == 0, run.stderr[-3000:]
        assert "sum 6" in run.stdout
        assert "removed 2 runs" in run.stderr and "--keep 2" in run.stderr, run.stderr
        left = sorted(p.name for p in runs.iterdir())
        new = [n for n in left if n.startswith("2026") and n != "20260103-000000-cccccc"]
        assert len(new) == 1, left  # the run just made
        assert left == sorted(["20260103-000000-cccccc", *new, "mine",
                               "20251231-000000-dddddd", "20251230-000000-eeeeee"])
        assert (outside / "keep-me").read_text() == "not a run"

        listed = _doctor(tmp_path, "runs", shell_tail="| head -n 3")
        assert listed.returncode == 0 and not listed.stderr, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["started", "outcome", "size", "run", "command"]
        assert lines[1].split()[2] == "completed" and \
            lines[1].endswith(f"ddpdoctor-runs/{new[0]}  {sys.executable} "
                              f"{JOBS / 'no_distributed.py'}"), lines
        assert "ddpdoctor-runs/20260103-000000-cccccc  train.py --lr 0.1" in lines[2]
        whole = _doctor(tmp_path, "runs").stdout.splitlines()
        assert any(" running " in f" {line} " and "20251231-000000-dddddd" in line
                   for line in whole), whole
        assert whole[-1].startswith("4 runs, ") and whole[-1].endswith("; 1 live"), whole

        dry = _doctor(tmp_path, "runs", "prune", "--older-than", "5d", "--dry-run")
        assert dry.returncode == 0 and "would remove 1 run " in dry.stdout, dry.stdout
        assert (runs / "20260103-000000-cccccc").is_dir()
        pruned = _doctor(tmp_path, "runs", "prune", "--keep", "0")
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        assert sorted(p.name for p in runs.iterdir()) == [
            "20251230-000000-eeeeee", "20251231-000000-dddddd", "mine"]
        assert "1 live one among them" in pruned.stdout
    finally:
        holder.kill()
        holder.wait()
    assert (outside / "keep-me").exists()
    gone = _doctor(tmp_path, "runs", "prune", "--keep", "0")
    assert "removed 1 run " in gone.stdout, gone.stdout  # no longer live
    shutil.rmtree(runs)


@pytest.mark.parametrize("args, says", [
    (["runs", "prune"], "--keep N or --older-than AGE"),
    (["runs", "prune", "--keep", "2", "--older-than", "1d"], "--keep N or --older-than AGE"),
    (["runs", "prune", "--older-than", "soon"], "not an age: 'soon'"),
    (["runs", "prune", "--keep", "-1"], "--keep must be 0 or more"),
    (["runs", "list", "nowhere"], "nowhere is not a directory of runs"),
    (["run", "--keep", "0", "train.py"], "not a number of runs (1 or more) or all"),
    (["run", "--fail-on", "sometimes", "train.py"], "invalid choice: 'sometimes'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    done = _doctor(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
