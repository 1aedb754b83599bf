"""`ddpdoctor run` on real gloo jobs, in all three command forms: each bug named, with its rank."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from rich.console import Console

from ddpdoctor.config import RunConfig
from ddpdoctor.supervisor.loop import Supervisor
from tests.conftest import JOBS

pytestmark = pytest.mark.slow

HANG_TIMEOUT = 6


def command(form: str, nranks: int) -> list[str]:
    if form == "script":
        return ["--nproc-per-node", str(nranks), str(JOBS / "collectives.py")]
    if form == "torchrun":
        launcher = shutil.which("torchrun")
        prefix = [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]
        return ["--", *prefix, "--nproc-per-node", str(nranks), str(JOBS / "collectives.py")]
    return ["--", sys.executable, str(JOBS / "spawn_collectives.py"), str(nranks)]


def run_bug(doctor, form: str, bug: str, nranks: int = 2, culprit: int | None = None,
            timeout: float = HANG_TIMEOUT):
    env = {"BUG": bug}
    if culprit is not None:
        env["CULPRIT"] = str(culprit)
    return doctor(["run", "--hang-timeout", str(timeout), *command(form, nranks)], env=env)


# Launch-specific behaviour (a clean exit, an exception, a signal) runs in every launch form;
# a diagnosis does not depend on the launcher, so each of those scenarios runs in one form,
# the forms taken in turn (the causal model itself is unit-tested without processes).
FORMS = ["script", "torchrun", "spawn"]


@pytest.mark.parametrize("form", FORMS)
def test_healthy_job_runs_clean(doctor, form):
    run = run_bug(doctor, form, "none")
    assert run.returncode == 0, run.stderr[-2000:]
    report = run.report
    assert report["outcome"] == "completed"
    assert report["world_size"] == 2
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    assert {r["state"] for r in report["ranks"]} == {"exited"}
    assert all(r["last_seq"] == 7 for r in report["ranks"])
    # the nodes and world size, even for a job shorter than the supervisor's slower looks
    assert [(m["nodes"], m["world_size"]) for m in report["membership"]] == [(1, 2)]


def test_membership_of_ranks_that_ran_between_two_looks(doctor):
    """The report names the nodes and world size even when the supervisor never looked
    while a rank ran (a short job on a loaded machine): the last look, as the report is
    written, sees the ranks that are gone."""
    run = run_bug(doctor, "script", "none")
    log = run.run_dir / "supervisor.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()
                           if json.loads(line).get("event") != "membership"))
    ended = subprocess.Popen(["true"])
    ended.wait()
    sup = Supervisor(RunConfig(command=("train.py",)), run.run_dir, ended,
                     run.run_dir / "again.json", Console(file=io.StringIO()), 0)
    assert sup.ending.ended(sup.watch, 0) == 0
    report = sup.report
    assert [(m["nodes"], m["world_size"]) for m in report["membership"]] == [(1, 2)]


@pytest.mark.parametrize("form", ["script"])
def test_shape_mismatch_in_all_reduce(doctor, form):
    run = run_bug(doctor, form, "shape")
    assert run.returncode != 0
    [f] = run.findings("collective_mismatch")
    assert f["seq"] == 6 and f["evidence"]["differs"] == "shape"
    assert f["ranks"] == [0, 1]  # two ranks, same call site, no majority: both named
    assert f["evidence"]["calls"]["1"]["shapes"] == [[11]]


@pytest.mark.parametrize("form", ["torchrun"])
def test_dtype_mismatch(doctor, form):
    run = run_bug(doctor, form, "dtype")
    assert run.returncode != 0
    [f] = run.findings("collective_mismatch")
    assert f["seq"] == 6 and f["evidence"]["differs"] == "dtype"
    assert f["evidence"]["calls"]["1"]["dtypes"] == ["float64"]


@pytest.mark.parametrize("form", ["spawn"])
def test_op_mismatch_is_a_hang_reported_before_the_timeout(doctor, form):
    run = run_bug(doctor, form, "op", timeout=60)
    assert run.returncode == 124
    report = run.report
    assert report["outcome"] == "hung"
    [f] = run.findings("collective_mismatch")
    assert f["ranks"] == [1] and f["seq"] == 6 and f["evidence"]["differs"] == "op"
    assert f["evidence"]["calls"]["1"]["op"] == "broadcast"
    assert "rank == culprit" in f["evidence"]["calls"]["1"]["condition"]
    # reported within 1 s of the divergence, not after the 60 s timeout
    entered = max(c["entered_at"] for c in f["evidence"]["calls"].values())
    [verdict] = run.supervisor_events("verdict")
    assert verdict["t"] / 1e9 - entered < 1.0
    assert {r["state"] for r in report["ranks"]} == {"hung"}
    assert all(r["stack"] for r in report["ranks"])  # py-spy saw every rank
    # the stop is quiet: no launcher traceback printed over the verdict
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    # `ddpdoctor analyze` rebuilds the same diagnosis offline
    again = doctor(["analyze", str(run.run_dir), "--report", str(run.run_dir / "again.json")])
    assert again.returncode == 1, again.stderr  # the diagnosing commands' rule: an error found
    rebuilt = json.loads((run.run_dir / "again.json").read_text())
    assert rebuilt["outcome"] == "hung"
    assert [(f["kind"], f["ranks"], f["seq"]) for f in rebuilt["findings"]] == \
        [("collective_mismatch", [1], 6)]


@pytest.mark.parametrize("form", ["script"])
def test_rank_conditional_collective(doctor, form):
    run = run_bug(doctor, form, "conditional")
    assert run.returncode != 0
    [f] = run.findings("collective_mismatch")
    assert f["ranks"] == [1] and f["seq"] == 6
    assert "rank == culprit" in f["detail"]


@pytest.mark.parametrize("form", ["torchrun"])
def test_barrier_inside_if_rank_0(doctor, form):
    run = run_bug(doctor, form, "barrier_rank0")
    assert run.returncode != 0
    [f] = run.findings("collective_mismatch")
    assert f["ranks"] == [0]
    assert f["evidence"]["calls"]["0"]["op"] == "barrier"
    assert "if rank == 0" in f["evidence"]["calls"]["0"]["condition"]


@pytest.mark.parametrize("form", ["torchrun", "spawn"])  # script: torchrun too
def test_rank_that_raises_is_quoted(doctor, form):
    run = run_bug(doctor, form, "raise")
    assert run.returncode != 0
    assert run.report["outcome"] == "failed"
    [f] = run.findings("rank_failed")
    assert f["ranks"] == [1] and f["severity"] == "error"
    assert "ValueError: boom on rank 1" in f["summary"]
    assert "collectives.py" in f["summary"]


@pytest.mark.parametrize("form", ["torchrun", "spawn"])  # script: torchrun too
def test_sigkilled_rank(doctor, form):
    run = run_bug(doctor, form, "sigkill")
    assert run.returncode != 0
    [f] = run.findings("rank_failed")
    assert f["ranks"] == [1]
    assert "SIGKILL" in f["summary"] or "vanished" in f["summary"]
    # rank 1 recorded all it did before the kill: 6 collectives on the default group
    rank1 = next(r for r in run.report["ranks"] if r["rank"] == 1)
    assert rank1["last_seq"] == 5


@pytest.mark.parametrize("bug,culprit", [("op", 3), ("barrier_rank0", 0)])
def test_four_ranks_majority_blame(doctor, bug, culprit):
    run = run_bug(doctor, "script", bug, nranks=4, culprit=culprit)
    [f] = run.findings("collective_mismatch")
    assert f["ranks"] == [culprit]
    assert len(run.report["ranks"]) == 4


def test_true_hang_reported_within_timeout_plus_3s_with_4_ranks(doctor):
    run = run_bug(doctor, "script", "sleep", nranks=4, culprit=2)
    assert run.returncode == 124
    report = run.report
    assert report["outcome"] == "hung"
    [f] = run.findings("missing_collective")
    assert f["ranks"] == [2]
    waiting = [r for r in report["ranks"] if r["rank"] != 2]
    entered = max(
        next(e["start"] for e in r["recent"] if e["seq"] == 6) for r in waiting)
    written = os.stat(run.run_dir / "report.json").st_mtime
    # the report is rewritten with the exit code after the stop: use the first write
    [first_report] = run.supervisor_events("report")[:1]
    assert first_report["t"] / 1e9 - entered <= HANG_TIMEOUT + 3
    assert written >= first_report["t"] / 1e9 - 1
    sleeper = next(r for r in report["ranks"] if r["rank"] == 2)
    assert sleeper["state"] == "blocked"  # in time.sleep: no CPU, outside any call
    assert sleeper["blocked_on"]["syscall"] in ("clock_nanosleep", "nanosleep")
    assert any(fr["name"] == "main" for fr in sleeper["stack"])


def test_ranks_forked_from_an_instrumented_process_answer_the_flight_recorder(doctor):
    """mp.start_processes(start_method="fork") forks the ranks from a process that imported
    torch, so ddpdoctor's threads started there (the flight-recorder watcher, the supervisor
    watch) are not in them: each rank starts its own, and answers the hang's dump request."""
    run = doctor(["run", "--hang-timeout", str(HANG_TIMEOUT), "--", sys.executable,
                  str(JOBS / "spawn_collectives.py"), "2"],
                 env={"BUG": "barrier_rank0", "START_METHOD": "fork"})
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    assert errors and errors[0]["ranks"] == [0], errors
    [dumps] = run.supervisor_events("flight_recorder")
    assert dumps["ranks"] == [0, 1] and dumps["missing"] == [], dumps
