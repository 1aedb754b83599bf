"""What a user reads in a log or CI, with real jobs and a real shell (#56): the summary on
stdout and the notices on stderr (`2>/dev/null | tee log` keeps the summary, `| head -3`
ends cleanly), the job's output in job.log, `--ui` off a terminal said once and left, a
run dir used again that shows nothing of the earlier run, `--json` the report alone, and
a job whose rank fails under a launcher that polls (as DeepSpeed's) exiting with its own
status, not 124, its verdict never said."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests.conftest import JOBS, REPO, warmed

pytestmark = pytest.mark.slow

DOCTOR = [sys.executable, "-m", "ddpdoctor.cli"]


def shell(line: str, cwd, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``line`` in bash, its status ddpdoctor's (the first of the pipeline's)."""
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "COLUMNS"}
    return subprocess.run(["bash", "-c", line + "; exit ${PIPESTATUS[0]}"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def test_a_log_keeps_the_summary_and_a_run_dir_used_again_only_this_run(tmp_path):
    run_dir, log, err = tmp_path / "run", tmp_path / "log", tmp_path / "err"
    command = shlex.join([*DOCTOR, "run", "--run-dir", str(run_dir), "--hang-timeout", "5",
                         *warmed(["--nproc-per-node", "2", str(JOBS / "ddp_torch_killed.py")])])
    done = shell(f"{command} 2>/dev/null | tee {log}", tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]  # the job's own status
    summary = log.read_text()
    assert "ddpdoctor: failed" in summary and "run dir" not in summary  # notices: stderr
    assert f"Report: {run_dir}/report.json" in summary.splitlines()  # whole, one line
    assert "╭" not in summary and "…" not in summary  # off a terminal: plain, never cut
    assert "killed" in (run_dir / "job.log").read_text()  # the launcher's own words, kept
    first = json.loads((run_dir / "report.json").read_text())["findings"][0]
    assert first["kind"] == "rank_failed" and first["ranks"] == [1], summary
    assert f"  {first['summary']}" in summary.splitlines()  # its lines, whole

    # the same run dir again, a healthy job, --ui with no terminal, read by `head -3`
    command = shlex.join([*DOCTOR, "run", "--ui", "--run-dir", str(run_dir),
                          *warmed(["--nproc-per-node", "2", str(REPO / "examples" /
                                                                "train_hang.py"),
                                   "--fixed", "--steps", "3"])])
    done = shell(f"{command} 2>{err} | head -3", tmp_path)
    notices = err.read_text()
    assert done.returncode == 0, notices[-3000:]
    assert done.stdout.splitlines()[1:3] and "completed" in done.stdout.splitlines()[1]
    assert notices.count("--ui needs a terminal") == 1, notices
    assert "died" not in notices and "Traceback" not in notices, notices
    report = json.loads((run_dir / "report.json").read_text())
    assert report["outcome"] == "completed" and not report["findings"], report["findings"]
    assert len(list((run_dir / "traces").glob("*.ring"))) == 2  # this run's ranks alone
    assert (run_dir / "job.log").stat().st_size < 4096 and \
        "killed" not in (run_dir / "job.log").read_text()


def test_a_failed_rank_under_a_polling_launcher_exits_with_the_jobs_status(tmp_path):
    """Rank 2 (the last) works past the hang timeout while the others wait, then raises;
    its process takes a moment to end, the launcher looks once a second: the job's status
    (1), every time (python -m tests.stress_exit_status runs it many times), and no hang
    verdict said that does not stand."""
    run_dir = tmp_path / "run"
    done = subprocess.run([*DOCTOR, "run", "--json", "--run-dir", str(run_dir),
                           "--hang-timeout", "2", "--", sys.executable,
                           str(JOBS / "polling_launcher.py"), str(JOBS / "rank_fails.py")],
                          env={**os.environ, "NPROC": "3", "MASTER_PORT": "29583"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)  # --json: the report, nothing else on stdout
    assert report == json.loads((run_dir / "report.json").read_text())
    assert report["outcome"] == "failed" and report["exit_code"] == 1
    assert report["findings"][0]["kind"] == "rank_failed" and report["findings"][0]["ranks"] == [2]
    assert "made no progress" not in done.stderr  # no hang verdict said, then not kept
