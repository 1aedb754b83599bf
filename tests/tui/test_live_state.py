"""The live UI reads the supervisor's live state (RUN_DIR/live.json) and the traces' new records
instead of rebuilding the report; with no supervisor it builds the report as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from ddpdoctor.config import RunConfig
from ddpdoctor.supervisor.attempt_watch import AttemptWatch
from ddpdoctor.supervisor.live_state import LiveStateWriter
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter
from ddpdoctor.tui import source as source_module
from ddpdoctor.tui.app import make_app
from ddpdoctor.tui.live_follow import FULL_BUILD_EVERY_S
from ddpdoctor.tui.source import ReportSource
from ddpdoctor.tui.widgets.rank_table import RankTable

REPO = Path(__file__).resolve().parents[2]
PID0 = 3_900_000  # no real process has these pids
TEXT = b"10||float32|/job/train.py:42"


class Job:
    """Two or more ranks' traces written by the ranks' own TraceWriter, and the supervisor's
    AttemptWatch and LiveStateWriter over them, as `ddpdoctor run` has them."""

    def __init__(self, run_dir: Path, world: int = 2) -> None:
        self.run_dir = run_dir
        (run_dir / "traces").mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"command": ["train.py"]}))
        self.writers = []
        for r in range(world):
            with mock.patch("os.getpid", return_value=PID0 + r):
                w = TraceWriter(run_dir / "traces", "t", capacity=64)
            w.set_identity(r, world, r)
            w.meta("group", index=0, name="0", ranks=list(range(world)), size=world,
                   default=True)
            w.set_state(L.RankState.COMPUTING)
            self.writers.append(w)
        self.open: dict[int, int] = {}
        self.sup = AttemptWatch(RunConfig(command=("train.py", "--lr", "1")), run_dir,
                                started_ns=time.time_ns())
        self.state = LiveStateWriter(run_dir, every_s=0.0)

    def call(self, rank: int, seq: int, returns: bool = True) -> None:
        """Rank ``rank`` enters all_reduce ``seq`` (and returns from it unless told not to)."""
        w, t = self.writers[rank], time.time_ns()
        if rank in self.open:
            w.set_end(self.open.pop(rank), t)
        index = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, seq,
                         t, 0, 10, -1, 0, 40, -1, TEXT)
        w.set_last_seq(seq)
        if returns:
            w.set_end(index, t + 1000)
        else:
            self.open[rank] = index

    def tick(self) -> None:
        """One look of the supervisor: poll the traces, publish the live state."""
        self.sup.live.poll()
        self.state.publish(self.sup.live, self.sup.facts())


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every full report build, recorded (and a minimal report returned)."""
    built: list[Path] = []

    def build(run_dir: Path) -> dict[str, Any]:
        built.append(run_dir)
        return {"schema": "ddpdoctor.report/1", "outcome": "completed", "live": True,
                "ranks": [{"rank": 0, "stack": [{"name": "f", "filename": "train.py",
                                                 "line": 3}]}],
                "findings": [{"kind": "straggler", "severity": "warning", "ranks": [1],
                              "summary": "rank 1 is late"}],
                "waits": [{"rank": 0, "waits_for": [1], "group": "0", "seq": 2,
                           "op": "all_reduce"}]}

    monkeypatch.setattr(source_module, "build_run_dir_report", build)
    return built


def test_live_state_is_written_atomically_with_each_ranks_state(tmp_path: Path) -> None:
    job = Job(tmp_path / "run")
    for seq in range(3):
        job.call(0, seq)
        job.call(1, seq)
    job.call(0, 3, returns=False)  # rank 0 waits in seq 3, which rank 1 has not reached
    job.tick()
    state = json.loads((tmp_path / "run" / "live.json").read_text())
    assert state["schema"] == "ddpdoctor.live/1" and state["supervisor_pid"] == os.getpid()
    assert state["command"] == ["train.py", "--lr", "1"] and state["world_size"] == 2
    ranks = {r["rank"]: r for r in state["ranks"]}
    assert ranks[0]["state"] == "waiting" and ranks[0]["current"]["seq"] == 3
    assert ranks[0]["current"]["callsite"] == "train.py:42"
    assert ranks[1]["state"] == "computing" and ranks[1]["current"] is None
    assert ranks[1]["last_seq"] == 2
    job.call(1, 3, returns=False)  # now both are inside seq 3
    job.tick()
    ranks = {r["rank"]: r for r in json.loads((tmp_path / "run" / "live.json").read_text())
             ["ranks"]}
    assert ranks[0]["state"] == ranks[1]["state"] == "in_collective"
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")] == []
    assert oct((tmp_path / "run" / "live.json").stat().st_mode & 0o777) == "0o600"


def test_an_unchanged_state_is_not_written_again(tmp_path: Path) -> None:
    job = Job(tmp_path / "run")
    job.call(0, 0)
    job.call(1, 0)
    job.tick()
    path = tmp_path / "run" / "live.json"
    os.utime(path, ns=(1, 1))
    job.tick()
    assert path.stat().st_mtime_ns == 1
    job.call(0, 1)
    job.tick()
    assert path.stat().st_mtime_ns != 1


def test_the_source_reads_the_live_state_and_only_new_records(tmp_path: Path,
                                                              builds: list[Path]) -> None:
    job = Job(tmp_path / "run")
    for seq in range(5):
        job.call(0, seq)
        job.call(1, seq)
    job.tick()
    source = ReportSource(tmp_path / "run", is_running=lambda: True)
    report = source.poll()
    assert report["live"] is True and len(builds) == 1  # once, for findings and stacks
    assert [e["seq"] for e in report["timeline"]["0"]] == [0, 1, 2, 3, 4]
    assert report["findings"][0]["kind"] == "straggler" and report["waits"][0]["rank"] == 0
    assert report["ranks"][0]["stack"][0]["name"] == "f"
    assert report["profile"]["1"]["collectives"] == 5
    assert source.poll() is report, "nothing changed: the same report, nothing re-read"
    tails = list(source.follower._tails.values())
    job.call(0, 5, returns=False)
    job.tick()
    report = source.poll()
    assert [e["seq"] for e in report["timeline"]["0"]][-2:] == [4, 5]
    assert report["timeline"]["0"][-1]["end"] is None
    assert report["ranks"][0]["state"] == "waiting"
    assert all(t.read_upto == t.header.count for t in tails)
    job.call(1, 5)
    job.call(0, 6)  # rank 0's seq 5 returned: its entry gets its end
    job.tick()
    report = source.poll()
    assert report["timeline"]["0"][-2]["seq"] == 5 and report["timeline"]["0"][-2]["end"]
    assert len(builds) == 1, "a healthy job's live view builds no report"


def test_a_new_revision_rebuilds_findings_at_most_every_few_seconds(tmp_path: Path,
                                                                    builds: list[Path]) -> None:
    job = Job(tmp_path / "run")
    job.call(0, 0)
    job.call(1, 0)
    job.tick()
    now = [100.0]
    source = ReportSource(tmp_path / "run", is_running=lambda: True)
    source.follower.clock = lambda: now[0]
    source.poll()
    assert len(builds) == 1
    job.sup.mismatch_seen = True  # what the supervisor's next look may find
    job.tick()
    now[0] += 1.0
    source.poll()
    assert len(builds) == 1  # too soon after the last build
    now[0] += 5.0
    source.poll()
    assert len(builds) == 2


def test_a_dead_supervisors_live_state_falls_back_to_building_the_report(
        tmp_path: Path, builds: list[Path]) -> None:
    job = Job(tmp_path / "run")
    job.call(0, 0)
    job.tick()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    path = tmp_path / "run" / "live.json"
    state = json.loads(path.read_text())
    state["supervisor_pid"] = int(dead.stdout)  # ddpdoctor was killed: its state is stale
    path.write_text(json.dumps(state))
    report = ReportSource(tmp_path / "run", is_running=lambda: True).poll()
    assert report["outcome"] == "completed" and len(builds) == 1  # today's path


def test_no_live_state_builds_the_report(tmp_path: Path, builds: list[Path]) -> None:
    Job(tmp_path / "run").call(0, 0)  # traces, but no supervisor ever published
    source = ReportSource(tmp_path / "run", is_running=lambda: True)
    source.poll()
    source.poll()
    assert len(builds) == 2


async def test_the_app_shows_the_live_state(tmp_path: Path, builds: list[Path]) -> None:
    job = Job(tmp_path / "run", world=3)
    for r in range(3):
        job.call(r, 0)
    job.call(0, 1, returns=False)
    job.tick()
    source = ReportSource(tmp_path / "run", is_running=lambda: True)
    started = time.monotonic()
    app = make_app(tmp_path / "run", live_command=["train.py"], source=source,
                   poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one(RankTable)
        await pilot.pause(0.2)
        assert table.row_count == 3 and app.live
        assert table.get_cell("0", "state").plain == "waiting"
        assert table.get_cell("0", "op").plain.startswith("all_reduce")
        job.call(1, 1, returns=False)
        job.call(2, 1, returns=False)
        job.tick()
        deadline = time.monotonic() + 10
        while table.get_cell("2", "state").plain != "in_collective":
            assert time.monotonic() < deadline, table.get_cell("2", "state")
            await pilot.pause(0.05)
        assert table.get_cell("0", "state").plain == "in_collective"
        polls = app.polls
    # a rank blocked past 1 s is a new revision: one more build at most every few seconds
    assert len(builds) <= 1 + (time.monotonic() - started) / FULL_BUILD_EVERY_S < polls


@pytest.mark.slow
def test_a_real_run_publishes_its_live_state(doctor) -> None:
    run = doctor(["run", "--nproc-per-node", "2",
                  str(REPO / "tests" / "integration" / "jobs" / "collectives.py")])
    assert run.returncode == 0, run.stderr[-3000:]
    state = json.loads((run.run_dir / "live.json").read_text())
    assert state["schema"] == "ddpdoctor.live/1" and state["world_size"] == 2
    assert sorted(r["rank"] for r in state["ranks"]) == [0, 1]
    assert all(r["pid"] == p["pid"] for r, p in zip(state["ranks"], run.report["ranks"]))
