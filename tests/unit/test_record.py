"""CallRecord: the one record type of an event, as the reader decodes it (rank, group name,
iteration), as a report's entry reads back, and as the analysis names it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ddpdoctor.analysis.load.run_dirs import rank_run
from ddpdoctor.analysis.model import Call
from ddpdoctor.analysis.align.iterations import iterations
from ddpdoctor.analysis.load.flight_recorder import with_iterations
from ddpdoctor.report.schema import rank_entry, timeline_entry
from ddpdoctor.supervisor.watch import live_call
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.reader import read_trace
from ddpdoctor.trace.record import CallRecord, placed
from ddpdoctor.trace.writer import TraceWriter

BATCH = int(L.RecordKind.BATCH)
COLL = int(L.RecordKind.COLLECTIVE)


def _job_trace(tmp_path: Path) -> TraceWriter:
    """Rank 2: a group "tp" at local index 1; two iterations of loader 0, each a batch and
    two all_reduces (one on the world group, one on "tp"); a broadcast before any batch."""
    w = TraceWriter(tmp_path, "run-1", capacity=64)
    w.set_identity(2, 4, 2)
    w.meta("group", index=0, name="0", ranks=[0, 1, 2, 3], default=True)
    w.meta("group", index=1, name="tp", ranks=[2, 3])
    w.append(COLL, L.OP_CODES["broadcast"], 0, 0, 0, 0, 100, 101, 4, 0, 0, 16, -1,
             b"4|4|float32|/x/train.py:5|torch/nn/parallel/distributed.py:9|I")
    seq = {0: 1, 1: 0}
    for it in range(2):
        w.append(BATCH, L.OP_CODES["batch"], 0, 0, 0, it, 200 + it * 100, 201 + it * 100,
                 0, -1, 0, 0, -1, f"|||0:{it}:abc".encode())  # as the data probes write it
        for group in (0, 1):
            w.append(COLL, L.OP_CODES["all_reduce"], 1, 0, group, seq[group],
                     210 + it * 100 + group, 0 if (it, group) == (1, 1) else 220 + it * 100,
                     4, -1, 0, 16, -1, b"4|4|float32|/x/train.py:30")
            seq[group] += 1
    return w


def test_the_reader_gives_rank_group_name_and_iteration(tmp_path: Path) -> None:
    trace = read_trace(_job_trace(tmp_path).ring_path)
    calls = [r for r in trace.records if r.kind == L.RecordKind.COLLECTIVE]
    assert {r.rank for r in trace.records} == {2}
    assert [(c.op, c.group, c.group_index, c.seq, c.iteration) for c in calls] == [
        ("broadcast", "0", 0, 0, -1),
        ("all_reduce", "0", 0, 1, 0), ("all_reduce", "tp", 1, 0, 0),
        ("all_reduce", "0", 0, 2, 1), ("all_reduce", "tp", 1, 1, 1)]
    assert [b.iteration for b in trace.records if b.kind == L.RecordKind.BATCH] == [0, 1]
    assert calls[0].origin is Origin.DDP_INIT and calls[-1].open
    assert [c.index for c in calls] == [0, 2, 3, 5, 6]


def test_a_decoded_record_equals_one_made_by_its_constructor(tmp_path: Path) -> None:
    """The reader fills a record's fields directly (for speed): every field is set, and
    the record behaves as one built by ``CallRecord(...)``."""
    for rec in read_trace(_job_trace(tmp_path).ring_path).records:
        made = CallRecord(**{f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)})
        assert vars(rec).keys() == vars(made).keys()
        assert rec == made and hash(rec) == hash(made) and repr(rec) == repr(made)
        assert dataclasses.replace(rec, rank=7).rank == 7


def test_the_supervisor_makes_the_same_records(tmp_path: Path) -> None:
    """The supervisor's live records (raw fields, filled directly) are whole records too."""
    w = _job_trace(tmp_path)
    with open(w.ring_path, "rb") as f:
        buf = f.read()
    for rec in read_trace(w.ring_path).records:
        if rec.kind != L.RecordKind.COLLECTIVE:
            continue
        v = L.RECORD.unpack_from(buf, L.HEADER_SIZE + rec.index * L.RECORD_SIZE)
        live = live_call(2, rec.group, v)
        assert vars(live).keys() - {"fingerprint"} == {f.name for f in dataclasses.fields(rec)}
        assert live == dataclasses.replace(rec, iteration=-1)


def test_the_analysis_uses_the_same_records(tmp_path: Path) -> None:
    trace = read_trace(_job_trace(tmp_path).ring_path)
    run = rank_run(trace)
    assert Call is CallRecord
    assert run.calls["tp"][0] is next(r for r in trace.records if r.group == "tp")
    [first, _] = run.calls["0"][1:]
    assert first.describe() == "all_reduce(float32[4], sum)" and first.short_site == "train.py:30"
    [it] = iterations(run, buckets=False)  # the second batch has no successor: not closed
    assert it.index == 0 and [c.seq for c in it.calls] == [1, 0]


def test_an_unnamed_group_is_its_index_as_text() -> None:
    recs = placed([CallRecord(op="all_reduce", group_index=3),
                   CallRecord(op="batch", kind=L.RecordKind.BATCH, callsite="0:0:x"),
                   CallRecord(op="all_reduce", group_index=1)], 5, {1: "tp"})
    assert [(r.rank, r.group, r.iteration) for r in recs] == [(5, "3", -1), (5, "0", 0),
                                                              (5, "tp", 0)]


def test_a_report_entry_reads_back_as_a_record() -> None:
    rec = CallRecord.from_report_dict({
        "seq": 4, "group": "tp", "op": "broadcast", "shapes": [[32], []],
        "dtypes": ["float32", "int64"], "callsite": "train.py:30", "start": 12.5, "end": None,
        "origin": "ddp_forward", "iteration": 3})
    assert (rec.seq, rec.group, rec.op, rec.in_shapes, rec.dtypes) == (
        4, "tp", "broadcast", ((32,), ()), ("float32", "int64"))
    assert rec.t_start == 12_500_000_000 and rec.open
    assert rec.origin is Origin.DDP_FORWARD and rec.iteration == 3
    odd = CallRecord.from_report_dict({"seq": "x", "op": None, "shapes": 3,
                                       "origin": "elsewhere", "start": "2026-01-01T00:00:00Z"})
    assert (odd.seq, odd.op, odd.in_shapes, odd.origin, odd.iteration) == (
        -1, "?", (), Origin.USER, -1)
    assert odd.t_start == 1_767_225_600 * 1_000_000_000


def test_the_report_entries_carry_origin_and_iteration() -> None:
    """A rank's ``current`` and ``recent``/``timeline`` entries say which API issued the
    call and in which iteration; they read back as the same record facts."""
    from tests.unit.factory import job, rank, rec

    records = [rec(0, "batch", kind=L.RecordKind.BATCH, site="0:0:x", t=0.5),
               rec(0, t=1, flags=int(L.RecordFlag.BUCKET)),
               rec(1, "broadcast", t=2, dur=None, peer=0, origin=Origin.DDP_FORWARD)]
    j = job([rank(0, records, world=1)], outcome="hung")
    entry = rank_entry(j.ranks[0], j)
    assert entry["current"]["origin"] == "ddp_forward" and entry["current"]["iteration"] == 0
    assert [(e["op"], e["origin"], e["iteration"]) for e in entry["recent"]] == [
        ("all_reduce", "ddp_backward", 0), ("broadcast", "ddp_forward", 0)]
    back = CallRecord.from_report_dict(entry["recent"][-1])
    assert (back.origin, back.iteration, back.open) == (Origin.DDP_FORWARD, 0, True)
    before = timeline_entry(dataclasses.replace(j.ranks[0].calls["0"][0], iteration=-1))
    assert before["iteration"] is None and before["origin"] == "ddp_backward"


def test_a_call_only_the_flight_recorder_saw_gets_the_iteration_of_its_time() -> None:
    from tests.unit.factory import rank, rec

    run = rank(0, [rec(0, "batch", kind=L.RecordKind.BATCH, site="0:0:x", t=1),
                   rec(1, "batch", kind=L.RecordKind.BATCH, site="0:1:x", t=3)], world=1)
    untraced = [dataclasses.replace(rec(s, t=t), rank=0) for s, t in ((0, 0.5), (1, 2), (2, 4))]
    assert [c.iteration for c in untraced] == [-1, -1, -1]
    assert [c.iteration for c in with_iterations(run, untraced)] == [-1, 0, 1]
