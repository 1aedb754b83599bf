"""LiveJob, the supervisor's incremental view of the ranks' traces, over real trace files."""

from __future__ import annotations

import time

from ddpdoctor.supervisor.watch import LiveJob, live_call
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

_TEXT = b"10|-|float32|/x/train.py:42"


def _rank(traces, rank: int, calls: int, open_for_s: float | None = None,
          state: L.RankState = L.RankState.COMPUTING) -> TraceWriter:
    """A rank's trace: ``calls`` all_reduces that returned, then one open for ``open_for_s``;
    renamed to a pid of its own so that several ranks of one test process can coexist."""
    w = TraceWriter(traces, "run-1", capacity=64)
    w.set_identity(rank, 2, rank)
    w.meta("group", index=0, name="0", ranks=[0, 1])
    w.set_state(state)
    now = time.time_ns()
    for i in range(calls):
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, i,
                     now - 10**9 + i, 0, 10, -1, 0, 0, -1, _TEXT)
        w.set_end(h, now - 10**9 + i + 1)
    if open_for_s is not None:
        w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, calls,
                 now - int(open_for_s * 1e9), 0, 10, -1, 0, 0, -1, _TEXT)
    for path in (w.ring_path, w.meta_path):
        path.rename(path.with_name(path.name.replace(f"pid-{w.pid}.", f"pid-{1000 + rank}.")))
    return w


def _live(run_dir) -> LiveJob:
    live = LiveJob(run_dir)
    live.poll()
    return live


def test_steady_while_every_rank_runs_and_none_waits(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    writers = [_rank(traces, 0, 5), _rank(traces, 1, 5, open_for_s=0.001)]
    live = _live(tmp_path)
    assert len(live.ranks()) == 2
    assert live.steady(0.1)  # rank 1 has been inside its all_reduce for a millisecond
    assert not live.steady(0.0005)
    for w in writers:
        w.close()


def test_not_steady_when_a_rank_waits_starts_or_ended(tmp_path):
    waits, starts, ended = (tmp_path / name for name in ("waits", "starts", "ended"))
    for d in (waits, starts, ended):
        (d / "traces").mkdir(parents=True)
    writers = [_rank(waits / "traces", 0, 3), _rank(waits / "traces", 1, 3, open_for_s=0.5),
               _rank(starts / "traces", 0, 3),
               _rank(starts / "traces", 1, 0, state=L.RankState.STARTING),
               _rank(ended / "traces", 0, 3), _rank(ended / "traces", 1, 3,
                                                    state=L.RankState.EXITED)]
    assert not _live(waits).steady(0.1)
    assert not _live(starts).steady(0.1)
    assert not _live(ended).steady(0.1)
    assert not LiveJob(tmp_path / "none").steady(0.1)  # no rank yet: not steady either
    for w in writers:
        w.close()


def test_live_call_decodes_a_repeated_record_as_the_first():
    now = time.time_ns()
    fields = [0, int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, 7, now,
              now + 5, 10, -1, 3, 0, -1, _TEXT]
    first = live_call(0, "0", tuple(fields))
    fields[6], fields[7], fields[8] = 8, now + 10, 0  # the next seq, still open
    again = live_call(1, "0", tuple(fields))
    assert (first.op, first.reduce_op, first.in_shapes, first.dtypes, first.callsite,
            first.kind) == ("all_reduce", "sum", ((10,),), ("float32",), "/x/train.py:42",
                            L.RecordKind.COLLECTIVE)
    assert (again.rank, again.seq, again.t_start, again.open, again.aux) == (1, 8, now + 10,
                                                                            True, 3)
    assert (again.op, again.in_shapes, again.callsite) == (first.op, first.in_shapes,
                                                           first.callsite)
    assert again.__dict__["fingerprint"] == first.__dict__["fingerprint"]
