"""torchrun --max-restarts under ddpdoctor: one run dir and one report per attempt."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.conftest import JOBS

pytestmark = pytest.mark.slow


def test_failed_attempt_then_healthy_restart(doctor):
    launcher = shutil.which("torchrun")
    prefix = [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]
    run = doctor(["run", "--hang-timeout", "60", "--", *prefix, "--max-restarts", "1",
                  "--nproc-per-node", "2", str(JOBS / "restart_once.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    top = run.report
    assert top["outcome"] == "completed" and top["attempt"] == 1
    assert top["attempts"] == [
        {"attempt": 0, "outcome": "failed", "report": "attempt-0/report.json"},
        {"attempt": 1, "outcome": "completed", "report": "attempt-1/report.json"}]
    first = json.loads((run.run_dir / "attempt-0" / "report.json").read_text())
    roots = [f for f in first["findings"]
             if f["severity"] == "error" and f.get("caused_by") is None]
    assert [(f["kind"], f["ranks"]) for f in roots] == [("rank_failed", [1])], roots
    assert "rank 1 fails in attempt 0" in roots[0]["summary"]
    assert "restart_once.py" in roots[0]["summary"]
    exits = {r["rank"]: r["exit_code"] for r in first["ranks"]}
    assert exits[1] == 1, first["ranks"]  # from torchrun's agent, which spans the attempts
    second = json.loads((run.run_dir / "attempt-1" / "report.json").read_text())
    assert second["outcome"] == "completed"
    assert [f for f in second["findings"] if f["severity"] == "error"] == []
    assert {r["rank"] for r in second["ranks"]} == {0, 1}
    assert "attempt 0 failed: rank 1 failed" in " ".join(run.stderr.split())

    # offline: the same attempts and the same root cause
    again = doctor(["analyze", "--json", str(run.run_dir)])
    assert again.returncode == 0, again.stderr[-2000:]
    analyzed = json.loads((run.run_dir / "report.analyzed.json").read_text())
    assert [(e["attempt"], e["outcome"]) for e in analyzed["attempts"]] == \
        [(0, "failed"), (1, "completed")]
    first_again = json.loads((run.run_dir / "attempt-0" / "report.analyzed.json").read_text())
    assert [(f["kind"], f["ranks"]) for f in first_again["findings"]
            if f["severity"] == "error" and f.get("caused_by") is None] == \
        [("rank_failed", [1])]


def test_job_without_restarts_keeps_the_plain_layout(doctor):
    run = doctor(["run", "--hang-timeout", "60", "--nproc-per-node", "2",
                  str(JOBS / "collectives.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list(run.run_dir.glob("attempt-*"))
    assert "attempts" not in run.report
    assert {p.name.split(".")[-1] for p in (run.run_dir / "traces").glob("pid-*")} >= {"ring"}
