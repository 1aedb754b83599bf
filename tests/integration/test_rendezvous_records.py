"""A rank's trace exists from process start (STARTING), and its set-up calls are MARK records."""

from __future__ import annotations

import pytest

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace
from tests.conftest import JOBS, REPO

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
        assert init.callsite.endswith("rendezvous.py:33")
        groups = marks(trace, "new_group")
        # new_group([0, 1]), then new_subgroups(1) makes one group per rank
        assert [(g.seq, g.aux) for g in groups] == [(0, 2), (1, 1), (2, 1)]
        assert all(g.t_end >= g.t_start > init.t_end - 1 for g in groups)
        assert all(g.callsite.endswith(("rendezvous.py:35", "rendezvous.py:36"))
                   for g in groups)
    # rank 1 arrived a second late: rank 0's init waited for it
    late, early = marks(traces[1], "init")[0], marks(traces[0], "init")[0]
    assert early.t_start < late.t_start <= early.t_end


def test_a_flight_recorder_size_torch_cannot_parse_is_noticed_and_its_stall_named(doctor):
    """TORCH_FR_BUFFER_SIZE=abc: torch 2.13's gloo hangs (or, racing, aborts) while it
    creates the process group.  ddpdoctor leaves the variable as set, says so in a notice,
    and a hang inside init on every rank is a stalled_call naming them all."""
    run = doctor(["run", "--hang-timeout", "8", "--nproc-per-node", "2",
                  str(JOBS / "collectives.py")], env={"TORCH_FR_BUFFER_SIZE": "abc"})
    assert run.returncode in (1, 124), run.stderr[-3000:]
    assert run.stderr.count("notice: TORCH_FR_BUFFER_SIZE='abc' is not an integer") == 1
    report = run.report
    assert any("TORCH_FR_BUFFER_SIZE" in n["text"] and n["ranks"] == [0, 1]
               for n in report["notices"])
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if report["outcome"] == "hung":
        assert run.returncode == 124
        assert errors[0]["kind"] == "stalled_call" and errors[0]["ranks"] == [0, 1]
        assert "collectives.py:19" in errors[0]["summary"]
    else:  # the abort: each rank's SIGABRT in init, said as it happened
        assert errors and errors[0]["kind"] == "rank_failed"


def test_the_older_variable_under_mp_spawn_is_noticed_once(doctor):
    """mp.spawn children name their rank only in init_process_group(rank=...) (no RANK
    variable): the notice before the rendezvous is printed once, not by every rank."""
    run = doctor(["run", "--hang-timeout", "8", "--", "python",
                  str(REPO / "sample_bugs" / "metric_rank0_only_fixed.py")],
                 env={"TORCH_NCCL_TRACE_BUFFER_SIZE": "abc"})
    assert run.returncode in (1, 124), run.stderr[-3000:]
    assert run.stderr.count("notice: TORCH_NCCL_TRACE_BUFFER_SIZE='abc' is not an") == 1
    assert any("TORCH_NCCL_TRACE_BUFFER_SIZE" in n["text"] and n["ranks"] == [0, 1, 2]
               for n in run.report["notices"])
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    if run.report["outcome"] == "hung":
        assert errors[0]["kind"] == "stalled_call" and errors[0]["ranks"] == [0, 1, 2]
    else:  # the abort: each rank's SIGABRT in init, said as it happened
        assert errors and errors[0]["kind"] == "rank_failed"
