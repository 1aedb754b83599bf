"""A rank's trace exists from process start (STARTING), and its set-up calls are MARK records."""

from __future__ import annotations

import pytest

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace
from tests.conftest import JOBS

pytestmark = pytest.mark.slow

JOB = str(JOBS / "rendezvous.py")


def rank_traces(run_dir):
    traces = [read_trace(p) for p in sorted((run_dir / "traces").glob("pid-*.ring"))]
    return {t.header.rank: t for t in traces if t.header.rank >= 0}


def marks(trace, op):
    return [r for r in trace.records if r.kind == L.RecordKind.MARK and r.op == op]


@pytest.mark.parametrize("form", ["torchrun", "spawn"])
def test_trace_before_init_and_rendezvous_marks(doctor, form):
    args = (["--nproc-per-node", "2", JOB] if form == "torchrun" else
            ["--", "python", JOB, "spawn"])
    run = doctor(["run", "--hang-timeout", "30", *args])
    assert run.returncode == 0, run.stderr[-3000:]
    # each rank found its own trace, in state STARTING with its rank, before init
    assert "rank 0 early trace ok" in run.stdout and "rank 1 early trace ok" in run.stdout
    traces = rank_traces(run.run_dir)
    assert sorted(traces) == [0, 1]  # no trace for a helper process claims a rank
    for rank, trace in traces.items():
        assert trace.header.world_size == 2 and trace.header.state == L.RankState.EXITED
        [init] = marks(trace, "init")
        assert init.t_end >= init.t_start > trace.header.started_ns
        assert not init.flags & L.RecordFlag.FAILED
        assert init.callsite.endswith("rendezvous.py:34")
        groups = marks(trace, "new_group")
        # new_group([0, 1]), then new_subgroups(1) makes one group per rank
        assert [(g.seq, g.aux) for g in groups] == [(0, 2), (1, 1), (2, 1)]
        assert all(g.t_end >= g.t_start > init.t_end - 1 for g in groups)
        assert all(g.callsite.endswith(("rendezvous.py:36", "rendezvous.py:37"))
                   for g in groups)
    # rank 1 arrived a second late: rank 0's init waited for it
    late, early = marks(traces[1], "init")[0], marks(traces[0], "init")[0]
    assert early.t_start < late.t_start <= early.t_end
