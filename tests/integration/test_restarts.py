"""torchrun --max-restarts under ddpdoctor: one run dir and one report per attempt.

The job keeps each attempt's store keys under a prefix of their own: with torch's
default, a restarted rank can read an address its dead peer of the earlier attempt left
in the launcher's store and hang in init_process_group (plain torchrun too).  The success
test allows one more restart all the same, and asserts the last attempt whichever it is."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor.config import RunConfig
from ddpdoctor.supervisor.loop import Supervisor
from tests.conftest import JOBS

pytestmark = pytest.mark.slow


def torchrun() -> list[str]:
    launcher = shutil.which("torchrun")
    return [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]


def supervised_after_the_end(run_dir: Path, copy: Path, max_restarts: int) -> dict:
    """The report of a copy of ``run_dir``'s finished job, from a supervisor that starts
    at attempt 0 and first looks when the job (a process that exited 0) has ended."""
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report*.json"))
    ended = subprocess.Popen(["true"])
    ended.wait()
    sup = Supervisor(RunConfig(command=("torchrun", "restart_once.py")), copy, ended,
                     copy / "report.json", Console(file=io.StringIO()), 0,
                     max_restarts=max_restarts)
    assert sup.run() == 0
    assert sup.report == json.loads((copy / "report.json").read_text())
    return sup.report


def test_failed_attempt_then_healthy_restart(doctor, tmp_path):
    run = doctor(["run", "--hang-timeout", "60", "--", *torchrun(), "--standalone",
                  "--max-restarts", "2", "--nproc-per-node", "2",
                  str(JOBS / "restart_once.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    top = run.report
    last = top["attempt"]
    assert top["outcome"] == "completed" and last >= 1
    assert top["attempts"][0] == {"attempt": 0, "outcome": "failed",
                                  "report": "attempt-0/report.json"}
    assert top["attempts"][-1] == {"attempt": last, "outcome": "completed",
                                   "report": f"attempt-{last}/report.json"}
    assert [e["attempt"] for e in top["attempts"]] == list(range(last + 1))
    first = json.loads((run.run_dir / "attempt-0" / "report.json").read_text())
    roots = [f for f in first["findings"]
             if f["severity"] == "error" and f.get("caused_by") is None]
    assert [(f["kind"], f["ranks"]) for f in roots] == [("rank_failed", [1])], roots
    assert "rank 1 fails in attempt 0" in roots[0]["summary"]
    assert "restart_once.py" in roots[0]["summary"]
    exits = {r["rank"]: r["exit_code"] for r in first["ranks"]}
    assert exits[1] == 1, first["ranks"]  # from torchrun's agent, which spans the attempts
    second = json.loads((run.run_dir / f"attempt-{last}" / "report.json").read_text())
    assert second["outcome"] == "completed"
    assert [f for f in second["findings"] if f["severity"] == "error"] == []
    assert {r["rank"] for r in second["ranks"]} == {0, 1}
    assert "attempt 0 failed: rank 1 failed" in " ".join(run.stderr.split())

    # the race of #56 replayed: a supervisor that looks for the first time once the job has
    # ended (every later attempt began and ended between two of its looks) still follows
    # each attempt in turn, and the job's report is the last one's, listing them all
    replay = supervised_after_the_end(run.run_dir, tmp_path / "replay", max_restarts=2)
    assert replay["attempt"] == last and replay["outcome"] == "completed"
    assert replay["attempts"] == top["attempts"]

    # offline: the same attempts and the same root cause
    again = doctor(["analyze", "--json", str(run.run_dir)])
    analyzed = json.loads((run.run_dir / "report.analyzed.json").read_text())
    errors = [f for f in analyzed["findings"] if f["severity"] == "error"]
    assert again.returncode == (1 if errors else 0), again.stderr[-2000:]
    assert [(e["attempt"], e["outcome"]) for e in analyzed["attempts"]] == \
        [(e["attempt"], e["outcome"]) for e in top["attempts"]]
    first_again = json.loads((run.run_dir / "attempt-0" / "report.analyzed.json").read_text())
    assert [(f["kind"], f["ranks"]) for f in first_again["findings"]
            if f["severity"] == "error" and f.get("caused_by") is None] == \
        [("rank_failed", [1])]


def test_every_attempt_fails(doctor):
    """Script form: --max-restarts 1 passed to torch's launcher; both attempts fail."""
    run = doctor(["run", "--hang-timeout", "60", "--standalone", "--max-restarts", "1",
                  "--nproc-per-node", "2", str(JOBS / "restart_once.py")],
                 env={"FAIL_EVERY_ATTEMPT": "1"})
    assert run.returncode not in (0, 124), run.stderr[-3000:]
    top = run.report
    assert top["outcome"] == "failed" and top["attempt"] == 1
    assert [(e["attempt"], e["outcome"]) for e in top["attempts"]] == \
        [(0, "failed"), (1, "failed")]
    first = json.loads((run.run_dir / "attempt-0" / "report.json").read_text())
    assert first["findings"][0]["kind"] == "rank_failed"
    assert first["findings"][0]["ranks"] == [1]
    assert "fails in attempt 0" in first["findings"][0]["summary"]
    second = json.loads((run.run_dir / "attempt-1" / "report.json").read_text())
    assert second["findings"][0]["kind"] == "rank_failed"
    assert second["findings"][0]["ranks"] == [1]
    assert "fails in attempt 1" in second["findings"][0]["summary"]
    assert "attempts: 0 failed; 1 failed" in run.stderr


def test_job_without_restarts_keeps_the_plain_layout(doctor):
    run = doctor(["run", "--hang-timeout", "60", "--nproc-per-node", "2",
                  str(JOBS / "collectives.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list(run.run_dir.glob("attempt-*"))
    assert "attempts" not in run.report
    assert {p.name.split(".")[-1] for p in (run.run_dir / "traces").glob("pid-*")} >= {"ring"}
