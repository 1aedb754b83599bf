"""`--ddp torch`'s buckets from torch's flight recorder: a rank's trace (without buckets) and
its dump in, bucket calls and findings out (no job launched)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.load import flight_recorder as fr
from ddpdoctor.analysis.load import fr_dumps as dumps
from ddpdoctor.analysis.load import fr_buckets
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.trace import fr_files
from ddpdoctor.trace import layout as L
from tests.unit.factory import NS, T0, frame, job, rank, rec
from tests.unit.flight_recorder_factory import entry, write_dump

BUCKETED = [{"event": "ddp_buckets", "source": "flight_recorder", "group": "0", "numel": 30}]
TORCH = "/usr/lib/python3/site-packages/torch"
IN_BACKWARD = [frame(f"{TORCH}/autograd/graph.py", 979, "_engine_run_backward"),
               frame(f"{TORCH}/autograd/__init__.py", 395, "backward"),
               frame(f"{TORCH}/_tensor.py", 623, "backward"),
               frame("/job/train.py", 36, "main")]


def at(seq: int, t: float, op: str = "all_reduce", size: int = 20, dtype: str = "Float",
       retired: bool = True) -> dict:
    return entry(seq, op, sizes=[[size]], dtype=dtype, retired=retired,
                 time_created_ns=T0 + int(t * NS))


def passes(first_seq: int, t: float, n: int, open_last: bool = False) -> list[dict]:
    """``n`` backward passes of two buckets (20 and 10 elements), the bucket order's int
    broadcast after the first; the last bucket still open if ``open_last``."""
    out, seq = [], first_seq
    for k in range(n):
        for size in (20, 10):
            out.append(at(seq, t + k + size / 100, size=size))
            seq += 1
        if k == 0:
            out.append(at(seq, t + k + 0.5, "broadcast", 3, "Int"))
            seq += 1
    if open_last:
        out[-1]["retired"] = False
    return out


def joined(run_dir: Path, ranks: dict, dumps: dict[int, list[dict]]) -> list[str]:
    for r, entries in dumps.items():
        done = sum(1 for e in entries if e["retired"])
        write_dump(fr_files.dump_dir(run_dir), r, entries, done, name=f"fr-rank-{r}.json")
    return fr.join_run_dir_dumps(run_dir, ranks)


def test_recorder_only_all_reduces_become_numbered_buckets(tmp_path):
    """A user's all_reduce (traced), then three passes of two buckets: numbered 0, 1 in each
    pass (a pass ends when its buckets moved the DDP's 30 elements; the int broadcast
    between is no bucket), at the user's backward line where the rank waits now."""
    run = rank(0, [rec(0, t=1.0, site="/job/train.py:20")], meta=BUCKETED, stack=IN_BACKWARD)
    notes = joined(tmp_path, {0: run}, {0: [at(1, 1.0005)] + passes(2, 2.0, 3, True)})
    calls = run.calls["0"]
    buckets = [(c.seq, c.aux, c.reduce_op) for c in calls if c.flags & L.RecordFlag.BUCKET]
    assert buckets == [(1, 0, "avg"), (2, 1, "avg"), (4, 0, "avg"), (5, 1, "avg"),
                       (6, 0, "avg"), (7, 1, "avg")]
    assert calls[0].callsite == "/job/train.py:20" and not calls[0].flags
    assert calls[3].op == "broadcast" and not calls[3].flags & L.RecordFlag.BUCKET
    assert {c.callsite for c in calls if c.flags & L.RecordFlag.BUCKET} == \
        {"/job/train.py:36"} and calls[-1].open  # one line: the rank's pattern stays one
    assert calls[-1].describe() == "all_reduce(float32[10], avg, DDP bucket 1)"
    assert notes == []  # the DDP's own calls: expected in the recorder only


def test_without_the_trace_saying_so_recorder_entries_stay_as_they_are():
    run = rank(0, [rec(0, t=1.0)])
    calls = fr.align(run.calls["0"], [c for c in run.calls["0"]])
    assert fr_buckets.mark(run, "0", calls, dumps.NO_CALLSITE) == calls


def test_a_backward_that_raised_for_a_gone_peer_failed_in_its_last_bucket(tmp_path):
    """Rank 1 ran two passes and returned; rank 0's third pass raised "Connection closed
    by peer" from backward: the recorder retired the failed work as done, the bucket is
    the call that failed, rank 0 only waited (no error finding) and rank 1 is named."""
    gone = "Connection closed by peer [127.0.0.1]:1234"
    runs = {0: rank(0, meta=BUCKETED, step=2, returncode=1, exception={
                "type": "RuntimeError", "message": gone,
                "traceback": [frame("/job/train.py", 36), *reversed(IN_BACKWARD[:3])]}),
            1: rank(1, meta=BUCKETED, step=2, state=L.RankState.EXITED, returncode=0)}
    joined(tmp_path, runs, {0: passes(1, 2.0, 3)[:-1], 1: passes(1, 2.0, 2)})
    last = runs[0].calls["0"][-1]
    assert last.flags & L.RecordFlag.FAILED and last.aux == 0
    assert last.callsite == "/job/train.py:36"
    assert not runs[1].calls["0"][-1].flags & L.RecordFlag.FAILED
    assert runs[1].calls["0"][-1].callsite == "/job/train.py:36"  # the job's one line
    findings = analyze(job(list(runs.values()), outcome="failed"))
    errors = [f for f in findings if f.severity.value == "error"]
    assert errors and all(f.ranks == (1,) for f in errors), [
        (f.kind, f.ranks, f.summary) for f in findings]


def test_ranks_that_tell_different_backward_lines_lend_none(tmp_path):
    """Rank 0 waits in backward at line 36, rank 1 at line 50, rank 2 exited: ranks 0 and
    1 keep their own lines, rank 2's buckets stay without one."""
    elsewhere = IN_BACKWARD[:3] + [frame("/job/train.py", 50, "main")]
    runs = {0: rank(0, meta=BUCKETED, stack=IN_BACKWARD, world=3),
            1: rank(1, meta=BUCKETED, stack=elsewhere, world=3),
            2: rank(2, meta=BUCKETED, state=L.RankState.EXITED, world=3)}
    joined(tmp_path, runs, {r: passes(1, 2.0, 2) for r in runs})
    sites = [{c.callsite for c in runs[r].calls["0"] if c.flags & L.RecordFlag.BUCKET}
             for r in runs]
    assert sites == [{"/job/train.py:36"}, {"/job/train.py:50"}, {fr_buckets.UNKNOWN_LINE}]


def test_an_object_collective_goes_with_its_own_recorder_entries():
    """broadcast_object_list is one traced call and two recorder entries (the sizes, then
    the bytes): it takes the first one's seq, both go with it, and the buckets after it
    keep the recorder's seqs on every rank alike (else the join failed: no buckets)."""
    from tests.unit.factory import rec as record

    obj = record(0, "broadcast_object_list", t=1.0, dur=0.01, flags=int(L.RecordFlag.OBJECT))
    run = rank(0, [obj], meta=BUCKETED)
    recorded = [dumps.entry_call(0, e, 9)[1] for e in
                [at(1, 1.001, "broadcast", 1, "Long"), at(2, 1.005, "broadcast", 40, "Byte"),
                 *passes(3, 2.0, 1)]]
    merged = fr_buckets.mark(run, "0", fr.align(run.calls["0"], recorded), dumps.NO_CALLSITE)
    assert [(c.seq, c.op, bool(c.flags & L.RecordFlag.BUCKET)) for c in merged] == [
        (0, "broadcast_object_list", False), (2, "all_reduce", True), (3, "all_reduce", True),
        (4, "broadcast", False)]


def test_a_call_another_rank_traced_is_that_call_not_a_bucket() -> None:
    """Rank 1's trace stopped (its recording failed): the recorder alone saw its user
    all-reduce at seq 3, which rank 0 traced as its own call; it is that call, with rank
    0's reduce op, never a bucket whose `avg` would differ from rank 0's `sum`.  Without
    the failure, or for another op, a bucket against a peer's own call stays a mismatch."""
    from dataclasses import replace
    from types import SimpleNamespace

    from ddpdoctor.analysis.model import Call

    def call(rank: int, seq: int, callsite: str, reduce_op: str = "", flags: int = 0,
             op: str = "all_reduce") -> Call:
        return Call(rank=rank, group="0", seq=seq, op=op, reduce_op=reduce_op,
                    in_shapes=((),), out_shapes=((),), dtypes=("float32",), flags=flags,
                    callsite=callsite, t_start=T0 + seq, t_end=T0 + seq + 1)

    def runs(failed: bool) -> dict:
        meta = [{"event": "runtime_error", "where": "begin"}] if failed else []
        trace = SimpleNamespace(meta_events=lambda e: [m for m in meta if m["event"] == e])
        return {r: SimpleNamespace(trace=trace if r == 1 else SimpleNamespace(
            meta_events=lambda e: [])) for r in (0, 1)}

    bucket = call(1, 3, fr_buckets.UNKNOWN_LINE, "avg", int(L.RecordFlag.BUCKET))
    merges = {0: [call(0, 3, "/job/train.py:69", "sum")], 1: [bucket]}
    fr_buckets.unmark_traced(runs(failed=True), merges, dumps.NO_CALLSITE)
    [theirs] = merges[1]
    assert theirs.reduce_op == "sum" and not theirs.flags & L.RecordFlag.BUCKET
    assert theirs.callsite == dumps.NO_CALLSITE  # its own line is not known
    healthy = {0: [call(0, 3, "/job/train.py:69", "sum")], 1: [bucket]}
    fr_buckets.unmark_traced(runs(failed=False), healthy, dumps.NO_CALLSITE)
    assert healthy[1] == [bucket]  # its trace is whole: a real mismatch
    other_op = {0: [call(0, 3, "/job/train.py:70", op="broadcast")], 1: [bucket]}
    fr_buckets.unmark_traced(runs(failed=True), other_op, dumps.NO_CALLSITE)
    assert other_op[1] == [bucket]
    both_buckets = {0: [replace(bucket, rank=0)], 1: [bucket]}
    fr_buckets.unmark_traced(runs(failed=True), both_buckets, dumps.NO_CALLSITE)
    assert both_buckets[1] == [bucket]  # a bucket on every rank stays a bucket
