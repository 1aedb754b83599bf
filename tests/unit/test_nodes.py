"""Many nodes: lost nodes, clock skew between hosts, and the run-dir copies node 0 keeps."""

from __future__ import annotations

import json
from array import array

import pytest

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.verdict import HangVerdict, judge
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.analysis.model import NS, NodeFacts, Severity
from ddpdoctor.rundir.nodes import NODE_FILE, node_dir
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import LoaderCount, read_trace
from ddpdoctor.trace.sync import RunDirDelta, apply_delta
from ddpdoctor.trace.writer import TraceWriter
from tests.unit import factory as f

# Ranks 0, 1 on host "a" (node 0), ranks 2, 3 on host "b".  After 5 steps ranks 0-2 enter
# step 5's all_reduce; rank 3 is elsewhere.
BLOCKED_AT = 995.0  # seconds after T0 (NOW is T0 + 1000 s)


def _two_nodes(shift: float = 0.0, lost: bool = False, skew: float | None = None,
               rank3_busy: bool = False, live: bool = True):
    runs = []
    for r in range(4):
        host = "a" if r < 2 else "b"
        records = f.steps(5, t0=900)
        if r != 3:
            records.append(f.rec(5, t=BLOCKED_AT, dur=None))
        runs.append(f.rank(r, records, world=4, host=host, shift=shift if host == "b" else 0,
                           cpu_busy=rank3_busy if r == 3 else False))
    job = f.job(runs, outcome=None if live else "hung", live=live, hang_timeout=4.0)
    job.nodes = {"b": NodeFacts("1", "b", None if skew is None else int(skew * NS), lost,
                                f.NOW - 2 * NS if lost else None)}
    return job


def test_a_lost_node_is_the_root_and_its_waiters_are_not_blamed():
    d = diagnose(_two_nodes(lost=True, live=False))
    errors = [x for x in d.findings if x.severity == Severity.ERROR]
    assert errors[0].kind == "node_lost" and errors[0].ranks == (2, 3), errors[0]
    assert "host b" in errors[0].summary and "ranks 0 and 1 wait" in errors[0].summary
    assert not any(set(e.ranks) & {0, 1} for e in errors)
    assert d.states[2].kind.value == "unreachable"  # its last seen "blocked" is stale


def test_a_lost_node_nobody_waits_on_is_a_warning():
    runs = [f.rank(r, f.steps(5, t0=900), world=4, host="a" if r < 2 else "b",
                   state=L.RankState.EXITED if r < 2 else L.RankState.COMPUTING)
            for r in range(4)]
    job = f.job(runs, outcome="completed")
    job.nodes = {"b": NodeFacts("1", "b", None, True, f.NOW)}
    [lost] = [x for x in diagnose(job).findings if x.kind == "node_lost"]
    assert lost.severity == Severity.WARNING and lost.ranks == (2, 3)
    assert "unknown" in lost.summary


def test_live_the_waits_on_a_lost_node_are_a_hang():
    found = judge(_two_nodes(lost=True), 4.0)
    assert isinstance(found, HangVerdict) and 3 in found.absent


@pytest.mark.parametrize("shift", [7.0, -7.0])
def test_a_skewed_clock_changes_no_verdict(shift):
    """Host b's clock runs ``shift`` s off; node 0 measured the skew through the store."""
    truth = judge(_two_nodes(), 4.0)
    assert isinstance(truth, HangVerdict) and truth.absent == (3,)
    skewed = judge(_two_nodes(shift=shift, skew=shift), 4.0)
    assert isinstance(skewed, HangVerdict) and skewed.absent == truth.absent
    assert {w.rank for w in skewed.waits} == {w.rank for w in truth.waits} == {0, 1, 2}
    assert diagnose(_two_nodes(shift=shift, skew=shift)).findings[0].ranks == (3,)


def test_a_young_wait_on_a_clock_behind_is_no_hang():
    """Host b's clock is 7 s behind: its rank 2 entered step 5 one second ago by node 0's
    clock, 8 s ago by the stamps alone; with the skew known that is no hang."""
    runs = [f.rank(r, f.steps(5, t0=900) + ([f.rec(5, t=999 - 7, dur=None)] if r == 2 else []),
                   world=4, host="a" if r < 2 else "b", cpu_busy=False) for r in range(4)]
    job = f.job(runs, outcome=None, live=True, hang_timeout=4.0)
    job.nodes = {"b": NodeFacts("1", "b", -7 * NS)}
    since = job.ranks[2].open_call().t_start
    assert (job.now_ns - since) / NS > 4.0  # node 0's clock alone would call it a hang
    assert judge(job, 4.0) is None


def _write_trace(trace_dir, n: int, open_last: bool = True) -> TraceWriter:
    w = TraceWriter(trace_dir, "run-1", capacity=64)
    w.set_identity(2, 4, 0)
    w.meta("group", index=0, name="0", ranks=[0, 1, 2, 3])
    for i in range(n):
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, i,
                     1000 + i, 0, 10, -1, 0, 0, -1, b"10|-|float32|/x/train.py:42")
        if i < n - 1 or not open_last:
            w.set_end(h, 2000 + i)
    return w


def test_a_run_dir_copies_piece_by_piece(tmp_path):
    src, mirror = tmp_path / "node1", tmp_path / "node0" / "nodes" / "1"
    (src / "traces").mkdir(parents=True)
    (src / "stacks").mkdir()
    (src / "run.json").write_text(json.dumps({"command": ["train.py"]}))
    w = _write_trace(src / "traces", 5)
    table = w.loader_table()
    table[4:8] = array("q", [7, 3, 41, 99])  # slot 1: loader 7's epoch 3 drew 41 batches
    delta = RunDirDelta(src)
    first = delta.collect()
    assert not apply_delta(mirror, json.loads(json.dumps(first)))  # JSON all the way
    copy = read_trace(mirror / "traces" / w.ring_path.name)
    assert [r.seq for r in copy.records] == [0, 1, 2, 3, 4] and copy.records[-1].open
    assert copy.header.rank == 2 and copy.groups()[0]["ranks"] == [0, 1, 2, 3]
    assert copy.header.loaders == (LoaderCount(7, 3, 41, 99),)  # the header's batch counts
    table.release()
    # the open call returns, three more come, a stack is written: only that is sent
    w.set_end(4, 2004)
    for i in range(5, 8):
        w.set_end(w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0,
                           i, 1000 + i, 0, 10, -1, 0, 0, -1, b"10|-|float32|/x/t.py:1"),
                  2000 + i)
    (src / "stacks" / "pid-1.json").write_text('{"frames": []}')
    second = delta.collect()
    [ring] = second["rings"]
    assert sorted(i for i, _ in ring["records"]) == [4, 5, 6, 7]
    assert {p["name"] for p in second["files"]} == {"stacks/pid-1.json"}
    apply_delta(mirror, second)
    copy = read_trace(mirror / "traces" / w.ring_path.name)
    assert [r.seq for r in copy.records] == list(range(8))
    assert not any(r.open for r in copy.records)
    assert (mirror / "stacks" / "pid-1.json").read_text() == '{"frames": []}'
    assert delta.collect()["files"] == []  # nothing changed: nothing sent


def test_a_delta_cannot_write_outside_its_mirror(tmp_path):
    bad = {"files": [{"name": "../../evil", "data": "eA=="},
                     {"name": "traces/../../x", "data": "eA=="}],
           "rings": [{"name": "/etc/x.ring", "capacity": 1, "header": "", "records": []}]}
    problems = apply_delta(tmp_path / "m", bad)
    assert len(problems) == 3 and not (tmp_path / "evil").exists()


def test_node_0_reads_its_mirrors_and_a_nodes_own_dir_wins(tmp_path):
    node1 = tmp_path / "node1"
    (node1 / "traces").mkdir(parents=True)
    (node1 / "run.json").write_text("{}")
    _write_trace(node1 / "traces", 3, open_last=False)
    node0 = tmp_path / "node0"
    (node0 / "traces").mkdir(parents=True)
    (node0 / "run.json").write_text("{}")
    mirror = node_dir(node0, "node1:host b")
    apply_delta(mirror, RunDirDelta(node1).collect())
    (mirror / NODE_FILE).write_text(json.dumps({"node": "1", "host": "hb",
                                                "clock_skew_ns": 7 * NS, "lost": True}))
    job = load_job([node0])
    assert list(job.ranks) == [2] and job.ranks[2].trace.path.parent.parent == mirror
    assert job.nodes["hb"].skew_ns == 7 * NS and job.nodes["hb"].lost
    both = load_job([node0, node1])  # analyze node0 node1: node 1's own dir is read
    assert both.ranks[2].trace.path.parent.parent == node1
