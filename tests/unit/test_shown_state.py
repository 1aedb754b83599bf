"""One function for a rank's shown state: the live view (live.json) and the report agree on the
same facts.  Each case writes the ranks' traces with the ranks' own TraceWriter (their
processes real, alive, stopped or killed), then reads them both ways: the supervisor's
AttemptWatch and its LiveStateWriter, and build_report over the same run dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import pytest

from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.config import RunConfig
from ddpdoctor.report.build import build_report
from ddpdoctor.report.shown_state import ShownFacts, shown_state
from ddpdoctor.supervisor.attempt_watch import AttemptWatch
from ddpdoctor.supervisor.live_state import LiveStateWriter
from ddpdoctor.supervisor.os_wait import sample_idle
from ddpdoctor.supervisor.progress import RankProgress
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

TEXT = b"10||float32|/job/train.py:42"
TIMEOUT = 5.0


class Ranks:
    """``world`` ranks whose processes are real (sleeping), their traces written as a rank
    writes them, and the supervisor's live view of them."""

    def __init__(self, run_dir: Path, world: int = 2) -> None:
        self.run_dir = run_dir
        (run_dir / "traces").mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"command": ["train.py"]}))
        self.procs = [subprocess.Popen(["sleep", "300"]) for _ in range(world)]
        self.writers = []
        for r, proc in enumerate(self.procs):
            with mock.patch("os.getpid", return_value=proc.pid):
                w = TraceWriter(run_dir / "traces", "t", capacity=64)
            w.set_identity(r, world, r)
            w.meta("group", index=0, name="0", ranks=list(range(world)), size=world,
                   default=True)
            self.writers.append(w)
        self.sup = AttemptWatch(RunConfig(command=("train.py",), hang_timeout=TIMEOUT),
                                run_dir, started_ns=time.time_ns())

    def running(self, *ranks: int) -> None:
        for r in ranks:
            self.writers[r].set_state(L.RankState.COMPUTING)

    def call(self, rank: int, seq: int, returns: bool = True, ago_s: float = 0.0) -> None:
        w, t = self.writers[rank], time.time_ns() - int(ago_s * 1e9)
        index = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0,
                         seq, t, 0, 10, -1, 0, 40, -1, TEXT)
        w.set_last_seq(seq)
        if returns:
            w.set_end(index, t + 1000)

    def init(self, rank: int, ago_s: float = 0.0) -> None:
        """Rank ``rank`` enters init_process_group (and stays inside)."""
        self.writers[rank].append(int(L.RecordKind.MARK), L.OP_CODES["init"], 0, 0, 0, 0,
                                  time.time_ns() - int(ago_s * 1e9), 0, 0, -1, 0, 0, -1,
                                  b"|||train.py:5")

    def log(self, event: str, **fields: Any) -> None:
        """An event of supervisor.jsonl, as the supervisor writes it."""
        fields.update(event=event, t=time.time_ns())
        with open(self.run_dir / "supervisor.jsonl", "a") as f:
            f.write(json.dumps(fields) + "\n")

    def look(self) -> tuple[dict[int, str], dict[int, str]]:
        """Each rank's shown state: (the live view's, the report's)."""
        live = self.sup.live
        live.poll()
        for p in live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)
        for p in live.stopped():
            p.stop_logged = True
            self.log("rank_stopped", pid=p.header.pid, rank=p.rank)
        state = LiveStateWriter(self.run_dir, every_s=0.0).state(live, self.sup.facts())
        report = build_report(self.run_dir, live=True, hang_timeout=TIMEOUT)
        return ({r["rank"]: r["state"] for r in state["ranks"]},
                {r["rank"]: r["state"] for r in report["ranks"]})


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    job = Ranks(tmp_path / "run")
    yield job
    for proc in job.procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()


def agree(job: Ranks, expected: dict[int, str]) -> None:
    live, report = job.look()
    assert live == report == expected, (live, report)


def test_computing_waiting_in_collective_and_hung(ranks: Ranks) -> None:
    ranks.running(0, 1)
    for seq in range(3):
        ranks.call(0, seq)
        ranks.call(1, seq)
    agree(ranks, {0: "computing", 1: "computing"})
    ranks.call(0, 3, returns=False)  # rank 1 has not reached seq 3
    agree(ranks, {0: "waiting", 1: "computing"})
    ranks.call(1, 3, returns=False)
    agree(ranks, {0: "in_collective", 1: "in_collective"})


def test_past_the_timeout_a_rank_waits_for_a_computing_peer_until_the_job_is_judged_hung(
        ranks: Ranks) -> None:
    """Slow is not hung: rank 1 still computes (a straggler, for all anyone knows yet), so
    rank 0, past the hang timeout in a call rank 1 has not reached, is waiting; once the
    causal model judges the job hung, the live view says hung."""
    ranks.running(0, 1)
    ranks.call(0, 0, returns=False, ago_s=TIMEOUT + 1)
    agree(ranks, {0: "waiting", 1: "computing"})
    ranks.sup.judged_hung = True
    live, _ = ranks.look()
    assert live == {0: "hung", 1: "computing"}


def test_the_rendezvous_waits_for_ranks_still_starting(ranks: Ranks) -> None:
    """Rank 0 inside init_process_group, rank 1 still starting: the report had rank 0
    starting, the live view had it in_collective; both say waiting now."""
    ranks.init(0)
    agree(ranks, {0: "waiting", 1: "starting"})
    ranks.init(1)
    agree(ranks, {0: "in_collective", 1: "in_collective"})


def test_exited_killed_and_stopped(ranks: Ranks) -> None:
    ranks.running(0, 1)
    ranks.call(0, 0)
    ranks.call(1, 0)
    os.kill(ranks.procs[1].pid, signal.SIGSTOP)
    assert _until(lambda: _proc_state(ranks.procs[1].pid) == "T")
    agree(ranks, {0: "computing", 1: "stopped"})
    ranks.writers[0].set_state(L.RankState.EXITED)
    ranks.procs[0].kill()
    ranks.procs[0].wait()
    agree(ranks, {0: "exited", 1: "stopped"})
    os.kill(ranks.procs[1].pid, signal.SIGKILL)
    ranks.procs[1].wait()
    agree(ranks, {0: "exited", 1: "killed"})


def test_a_rank_that_raised_has_failed(ranks: Ranks) -> None:
    ranks.running(0, 1)
    ranks.writers[1].meta("exception", thread="main", type="ValueError", message="boom",
                          traceback=[{"filename": "train.py", "line": 3, "name": "main"}])
    ranks.writers[1].set_state(L.RankState.FAILED)
    agree(ranks, {0: "computing", 1: "failed"})


def test_an_idle_rank_the_os_says_sleeps_is_blocked(ranks: Ranks) -> None:
    """The supervisor asked the OS about the idle rank 1 (its `sleep`): clock_nanosleep."""
    ranks.running(0, 1)
    ranks.call(0, 0)
    ranks.call(1, 0)
    ranks.sup.live.poll()
    pid = ranks.procs[1].pid
    ranks.sup.progress.by_pid[pid] = RankProgress(1, cpu_busy=False)
    ranks.log("progress", ranks=ranks.sup.progress.event())
    time.sleep(0.01)  # the os_wait event after the rank's last call
    sample_idle(ranks.sup.live, ranks.sup.progress, ranks.log, ranks.sup.os_waits)
    assert pid in ranks.sup.os_waits
    agree(ranks, {0: "computing", 1: "blocked"})


def test_the_rule_on_its_own() -> None:
    timeout_ns = int(TIMEOUT * 1e9)
    assert shown_state(ShownFacts(StateKind.DIED, killed=True), TIMEOUT) == "killed"
    assert shown_state(ShownFacts(StateKind.PEER_FAILED), TIMEOUT) == "failed"
    assert shown_state(ShownFacts(StateKind.BLOCKED, waited_ns=timeout_ns), TIMEOUT) == "hung"
    assert shown_state(ShownFacts(StateKind.BLOCKED, job_hung=True), TIMEOUT) == "hung"
    # past the timeout while a peer is still on its way: a straggler's, until judged hung
    assert shown_state(ShownFacts(StateKind.BLOCKED, waited_ns=timeout_ns, peers_behind=True),
                       TIMEOUT) == "waiting"
    assert shown_state(ShownFacts(StateKind.BLOCKED, waited_ns=timeout_ns, peers_behind=True,
                                  job_hung=True), TIMEOUT) == "hung"
    assert shown_state(ShownFacts(StateKind.BLOCKED, waited_ns=timeout_ns, peers_behind=True,
                                  p2p=True), TIMEOUT) == "hung"
    assert shown_state(ShownFacts(StateKind.BLOCKED, peers_behind=True, p2p=True),
                       TIMEOUT) == "in_collective"
    assert shown_state(ShownFacts(StateKind.DATA_LOADING), TIMEOUT) == "computing"
    assert shown_state(ShownFacts(StateKind.UNREACHABLE), TIMEOUT) == "unreachable"


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _until(check: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
