"""Inside a real rank: every collective and p2p call is recorded, with its details."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddpdoctor.analysis.load.run_dirs import load_job
from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow

COLLECTIVES = [
    "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all",
    "all_to_all_single", "monitored_barrier", "all_gather_object", "broadcast_object_list",
    "gather_object", "scatter_object_list", "all_reduce", "barrier",
]


def test_every_op_is_recorded_in_order(doctor):
    run = doctor(warmed(["run", "--nproc-per-node", "2", str(JOBS / "all_ops.py")]))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    assert [f for f in run.report["findings"] if f["severity"] != "info"] == []
    job = load_job([run.run_dir])
    for rank, r in job.ranks.items():
        calls = r.calls["0"]
        ops = [c.op for c in calls]
        assert ops == COLLECTIVES, ops
        assert [c.seq for c in calls] == list(range(len(calls)))
        assert all(not c.open for c in calls)
        first = calls[0]
        assert first.reduce_op == "max" and first.in_shapes == ((4,),)
        assert first.dtypes == ("float32",)
        assert first.callsite.endswith("all_ops.py:18")
        assert calls[1].peer == 1  # broadcast src
        assert calls[4].out_shapes == ((8,),)  # all_gather_into_tensor output
        assert calls[14].in_shapes == ((2,),)  # broadcast_object_list: list length
        p2p = [(c.op, c.peer) for c in r.p2p]
        other = 1 - rank
        expected = ([("send", other), ("recv", other)] if rank == 0 else
                    [("recv", other), ("send", other)])
        expected += [("isend", other), ("irecv", other), ("isend", other), ("irecv", other)]
        assert p2p == expected
        assert all(not c.open for c in r.p2p)  # async ones closed by wait()
        sub = [g for g in r.calls if g != "0"]
        assert len(sub) == 1 and [c.op for c in r.calls[sub[0]]] == ["all_reduce"]
        assert r.group_ranks[sub[0]] == [0, 1]
        assert r.header.state.name == "EXITED"


def test_user_sitecustomize_still_runs(doctor, tmp_path: Path):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('user site:', os.environ.get('USER_SITE_RAN'))\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    run = doctor(["run", "--", sys.executable, str(script)], env=env)
    assert run.returncode == 0, run.stderr
    assert "user site: yes" in run.stdout


GAPS = JOBS / "recording_gaps.py"


def test_compiled_collectives_are_in_the_sequence(doctor):
    run = doctor(warmed(["run", "--nproc-per-node", "2", str(GAPS)]), env={"SHAPE": "compiled"})
    assert run.returncode == 0, run.stderr[-3000:]
    job = load_job([run.run_dir])
    for rank, r in job.ranks.items():
        calls = r.calls["0"]
        ops = [(c.op, c.reduce_op) for c in calls]
        # eager all_reduce, 2 compiled steps of 3 all_reduces each, a functional
        # all_reduce, the final barrier
        assert ops == [("all_reduce", "sum")] + [("all_reduce", "sum"), ("all_reduce", "max"),
                                                 ("all_reduce", "sum")] * 2 + [
            ("all_reduce", "sum"), ("barrier", "")], (rank, ops)
        assert [c.seq for c in calls] == list(range(len(calls)))
        assert all(not c.open for c in calls)
        lines = GAPS.read_text().splitlines()
        at = [lines.index(f"    {src}") + 1 for src in (
            "dist.all_reduce(x)", "dist.all_reduce(y, op=dist.ReduceOp.MAX)",
            "dist.all_reduce(z)")]
        compiled_lines = [int(c.callsite.rsplit(":", 1)[1]) for c in calls[1:7]]
        assert compiled_lines == at * 2, compiled_lines  # the user's line inside the graph
        assert all("recording_gaps.py:" in c.callsite for c in calls), calls
        assert not [m for m in r.trace.meta if m.get("event") == "runtime_error"]


def test_future_completed_async_call_is_not_a_hang(doctor):
    run = doctor(warmed(["run", "--hang-timeout", "3", "--nproc-per-node", "2", str(GAPS)]),
                 env={"SHAPE": "future"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.report["outcome"] == "completed"
    job = load_job([run.run_dir])
    for r in job.ranks.values():
        calls = r.calls["0"]
        assert [c.op for c in calls] == ["all_reduce", "all_reduce", "barrier"]
        assert calls[1].flags & 1  # async
        # closed at completion, well before the 8 s of compute ended
        assert calls[1].t_end - calls[1].t_start < 4e9
        assert calls[2].t_start - calls[1].t_end > 7e9


def test_base_ops_named_p2p_peers_right_coalesced_batch_one_record(doctor):
    run = doctor(warmed(["run", "--nproc-per-node", "2", str(GAPS)]), env={"SHAPE": "base_p2p"})
    assert run.returncode == 0, run.stderr[-3000:]
    job = load_job([run.run_dir])
    for rank, r in job.ranks.items():
        calls = r.calls["0"]
        ops = [c.op for c in calls]
        assert ops == ["all_reduce", "_all_gather_base", "_reduce_scatter_base",
                       "all_reduce_coalesced", "barrier"], ops
        assert calls[1].out_shapes == ((4,),)
        assert calls[3].in_shapes == ((3,), (5,)) and calls[3].aux == 2
        assert all(not c.open for c in calls)
        p2p = [(c.op, c.peer) for c in r.p2p]
        assert p2p == [("isend", 1 - rank), ("irecv", 1 - rank)], p2p
        assert all(not c.open for c in r.p2p)


def test_an_instrumented_process_does_not_import_dynamo_until_the_job_does(tmp_path: Path):
    """Importing Dynamo costs seconds of CPU: a rank or launcher that never compiles (and
    never runs a DDP step, which imports it) must not pay it for ddpdoctor's remaps."""
    import subprocess

    bootstrap = Path(__file__).resolve().parents[2] / "ddpdoctor" / "launch" / "bootstrap"
    env = {**os.environ, "DDPDOCTOR_RUN_DIR": str(tmp_path / "run"),
           "PYTHONPATH": str(bootstrap)}
    probe = ("import sys, torch, torch.distributed as dist\n"
             "print(getattr(dist, '__ddpdoctor_patched__', False), "
             "'torch._dynamo' in sys.modules)\n"
             "import torch._dynamo\n"
             "import torch.distributed._functional_collectives as funcol\n"
             "print(dist.all_reduce in funcol.traceable_collective_remaps)\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False", "True"], done.stdout + done.stderr[-2000:]
