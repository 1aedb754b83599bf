"""`ddpdoctor attach` on a job started with plain torchrun, and flight recorder dumps of a
hung job read by `analyze` (real gloo ranks, real py-spy)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.proc.table import alive, descendants, scan
from tests.conftest import JOBS, run_doctor

pytestmark = pytest.mark.slow
JOB = JOBS / "rank0_barrier.py"
BARRIER_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1)
                    if "dist.barrier()" in line)
ATTACH_BUDGET_S = 10.0  # the promise: a diagnosis within 10 s of the call


def living(pids: set[int]) -> set[int]:
    return {p for p in pids if alive(p)}


def attach(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "attach", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return proc, time.monotonic() - t0


def test_attach_names_rank_0_and_its_line_and_leaves_the_job_running(tmp_path):
    ready = tmp_path / "ready"
    ready.mkdir()
    job = subprocess.Popen(["torchrun", "--standalone", "--nproc-per-node", "2", str(JOB)],
                           env={**os.environ, "READY_DIR": str(ready)}, cwd=tmp_path,
                           start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    tree = {job.pid}
    try:
        deadline = time.monotonic() + 120
        while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before it hung"
            time.sleep(0.2)
        assert len(list(ready.iterdir())) == 2, "the ranks never reached the divergence"
        tree |= descendants(scan(), [job.pid])  # torchrun puts each rank in its own session
        assert len(tree) >= 3

        run_dir = tmp_path / "attach-1"
        proc, took = attach([str(job.pid), "--run-dir", str(run_dir)], tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert took < ATTACH_BUDGET_S, f"attach took {took:.1f} s"
        report = json.loads((run_dir / "report.json").read_text())
        root = report["findings"][0]
        assert root["severity"] == "error"
        assert root["kind"] in ("collective_mismatch", "missing_collective")
        assert root["ranks"] == [0]
        assert f"{JOB.name}:{BARRIER_LINE}" in root["summary"] + root["detail"]
        assert report["sources"]["stacks"].startswith("py-spy")
        assert {r["rank"] for r in report["ranks"]} == {0, 1}
        assert f"{JOB.name}:{BARRIER_LINE}" in proc.stdout  # the console summary
        assert living(tree) == tree, "attach changed the job"
        assert job.poll() is None, "attach stopped the job"

        # for scripts, as run and analyze: --quiet the verdict and the report's path,
        # --json the report alone on stdout (the stop said on stderr)
        proc, _ = attach([str(job.pid), "--quiet", "--run-dir", str(tmp_path / "attach-q")],
                         tmp_path)
        assert proc.returncode == 1, proc.stderr
        verdict, path = proc.stdout.splitlines()
        assert verdict.startswith("ddpdoctor: ") and ": error " in verdict, verdict
        assert path == f"Report: {tmp_path / 'attach-q' / 'report.json'}"
        proc, _ = attach([str(job.pid), "--stop", "--json", "--run-dir",
                          str(tmp_path / "attach-2")], tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert json.loads(proc.stdout) == \
            json.loads((tmp_path / "attach-2" / "report.json").read_text())
        assert "stopped the job" in proc.stderr
        job.wait(timeout=30)
        deadline = time.monotonic() + 15
        while living(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert living(tree) == set(), "--stop left processes of the job"
    finally:
        for pid in living(tree | descendants(scan(), [job.pid])):
            os.kill(pid, signal.SIGKILL)
        job.wait(timeout=30)
    assert living(tree) == set()


def _hung_job(job: Path, tmp_path: Path) -> tuple[subprocess.Popen, set[int], float]:
    """A plain torchrun job (not under ddpdoctor) up to its hang: the Popen, the pids of its
    tree and when the ranks said they reached the hang (time.time())."""
    ready = tmp_path / "ready"
    ready.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node", "2", str(job)],
                            env={**os.environ, "READY_DIR": str(ready)}, cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it hung"
        time.sleep(0.1)
    reached = max(p.stat().st_mtime for p in ready.iterdir())
    return proc, {proc.pid} | descendants(scan(), [proc.pid]), reached


def test_attach_on_a_rank_blocked_on_a_lock_says_what_run_says_and_stop_says_what(tmp_path):
    """Rank 1 in lock.acquire(), rank 0 in all_reduce: attach judges with run's rules
    (blocked in futex, not computing; hung), measures the wait from when rank 0's main thread
    fell asleep (not the sampling window), shows no None, and --stop names what it stopped."""
    job, tree, reached = _hung_job(JOBS / "rank1_lock.py", tmp_path)
    try:
        time.sleep(4.0)  # longer than attach's sampling window
        proc, _ = attach([str(job.pid), "--stop", "--run-dir", str(tmp_path / "a")], tmp_path)
        waited = time.time() - reached
        assert proc.returncode == 1, proc.stderr
        report = json.loads((tmp_path / "a" / "report.json").read_text())
        assert report["outcome"] == "hung"
        assert "torch.distributed.run" in report["command"]  # the launcher's, not a rank's
        assert [(r["rank"], r["state"]) for r in report["ranks"]] == [(0, "hung"),
                                                                       (1, "blocked")]
        root = report["findings"][0]
        assert (root["kind"], root["ranks"]) == ("missing_collective", [1])
        assert "blocked in futex" in root["summary"] and "lock.acquire()" in root["summary"]
        assert "raise the process group's timeout" not in root["fix"]
        said = float(root["detail"].split("Waiting for ")[1].split(" s")[0])
        assert 4.0 <= said <= waited + 1.0, (said, waited)
        assert "None" not in proc.stdout and "#0" not in proc.stdout
        ranks = sorted(r["pid"] for r in report["ranks"])
        assert "stopped the job: SIGTERM to pids" in proc.stderr
        assert all(str(p) in proc.stderr for p in ranks), proc.stderr
        job.wait(timeout=30)
        again = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "analyze",
                                str(tmp_path / "a"), "--report", str(tmp_path / "b.json")],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 1, again.stderr  # attach's run dir, read again alike
        assert "None" not in again.stdout and "#0" not in again.stdout, again.stdout
        offline = json.loads((tmp_path / "b.json").read_text())
        assert [r["state"] for r in offline["ranks"]] == ["hung", "blocked"]
    finally:
        for pid in living(tree):
            os.kill(pid, signal.SIGKILL)
        job.wait(timeout=30)


def test_flight_recorder_dumps_of_a_hung_job_give_the_root_cause_of_run(tmp_path):
    run = run_doctor(["run", "--hang-timeout", "3", "--", "torchrun", "--standalone",
                      "--nproc-per-node", "2", str(JOB)], tmp_path)
    assert run.returncode == 124, run.stderr
    dumps = run.run_dir / "flight_recorder"
    assert sorted(p.name for p in dumps.glob("nccl_trace_rank_*")) == ["nccl_trace_rank_0",
                                                                       "nccl_trace_rank_1"]
    # torch's own tool reads them as its own (names, pickle, the default group's name)
    tool = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                           str(dumps)], capture_output=True, text=True, timeout=120)
    said = tool.stdout + tool.stderr  # its logger writes to stderr
    assert tool.returncode == 0 and "Traceback" not in said, said
    assert "0:default_pg" in said and "'barrier' does not match" in said, said
    by_run = run.report["findings"][0]
    # the direct process-group call joined the traced sequence at its seq
    assert any("seen only by torch's flight recorder" in p for p in run.report["problems"])
    assert [e["seq"] for e in run.report["timeline"]["0"]] == [0, 1, 2]
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "analyze", str(dumps),
                           "--report", str(tmp_path / "fr.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # the dumps' mismatch is an error finding
    by_dumps = json.loads((tmp_path / "fr.json").read_text())["findings"][0]
    assert (by_dumps["kind"], by_dumps["seq"], by_dumps["evidence"]["group"]) == \
        (by_run["kind"], by_run["seq"], by_run["evidence"]["group"]) == \
        ("collective_mismatch", 2, "0")
    assert by_run["ranks"] == [0]  # the barrier under `if rank == 0`
    assert 0 in by_dumps["ranks"]  # a dump has no call sites: a two-rank tie names both
    ops = {c["op"] for c in by_dumps["evidence"]["calls"].values()}
    assert ops == {c["op"] for c in by_run["evidence"]["calls"].values()} == \
        {"barrier", "all_reduce"}


@pytest.mark.parametrize("args, needle", [
    (["attach", "abc"], "not a PID"),
    (["attach", str(2 ** 22 + 4321)], "no process with PID"),
    (["analyze", "{dumps}"], "not a torch flight recorder dump"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, needle):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "fr-0").write_bytes(b"\x80\x04K\x01.")  # pickle of 1
    argv = [a.format(dumps=dumps) for a in args]
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and needle in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("ddpdoctor: ")
