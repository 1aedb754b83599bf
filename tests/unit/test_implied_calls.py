"""A rank blocked in a collective of DDP's reducer that no record shows (the bucket
rebuild's broadcast in the forward after the first backward): implied from its stack, and a
mismatch whose two sides are told apart by the rank test around the other rank's call,
found further out on its stack or at a line lint flagged."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.load.implied import add_reducer_call, reducer_call
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from tests.unit.factory import frame, job, rank, rec

BUCKET = int(L.RecordFlag.BUCKET)
DDP = "/usr/lib/python3/site-packages/torch/nn/parallel/distributed.py"
C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(
        "import torch.distributed as dist\n"             # 1
        "def reduce_mean(t):\n"                          # 2
        "    dist.all_reduce(t)\n"                       # 3
        "    return t\n"                                 # 4
        "def log(loss):\n"                               # 5
        "    return reduce_mean(loss)\n"                 # 6
        "def main(model, rank):\n"                       # 7
        "    for step in range(6):\n"                    # 8
        "        loss = model(step)\n"                   # 9
        "        loss.backward()\n"                      # 10
        "        if rank == 0:\n"                        # 11
        "            log(loss)\n")                       # 12
    return path


def _job(tmp_path: Path, blocked_in_forward: bool = True, lint_only: bool = False):
    script = str(_script(tmp_path))
    helper_site = f"{script}:3"
    r0 = rank(0, [rec(1, flags=BUCKET, t=1, site=f"{script}:10"),
                  rec(2, t=2, dur=None, site=helper_site, shape=())],
              stack=[frame(C10D, 2800, "all_reduce"), frame(script, 3, "reduce_mean"),
                     frame(script, 6, "log"),
                     frame(script, 12 if not lint_only else 9, "main")])
    top = frame(DDP, 1775, "DistributedDataParallel._pre_forward") if blocked_in_forward \
        else frame(DDP, 1890, "DistributedDataParallel.forward")
    r1 = rank(1, [rec(1, flags=BUCKET, t=1, site=f"{script}:10")],
              stack=[top, frame(DDP, 1886, "DistributedDataParallel.forward"),
                     frame(script, 9, "main")])
    add_reducer_call(r0)
    add_reducer_call(r1)
    return job([r0, r1]), script


def test_a_rank_blocked_in_ddps_forward_is_inside_its_reducers_broadcast(tmp_path):
    j, script = _job(tmp_path)
    [implied] = [c for c in j.ranks[1].calls["0"] if c.t_end == 0]
    assert (implied.op, implied.seq, implied.origin) == ("broadcast", 2, Origin.DDP_FORWARD)
    assert implied.callsite == f"{script}:9"
    assert reducer_call(j.ranks[0]) is None  # a rank with an open recorded call: nothing


def test_nothing_is_implied_elsewhere_in_forward_or_before_a_synced_backward(tmp_path):
    j, _ = _job(tmp_path, blocked_in_forward=False)
    assert not any(c.t_end == 0 for c in j.ranks[1].calls["0"])
    before = rank(1, [rec(1, t=1)], stack=[frame(DDP, 1775, "_pre_forward")])
    assert reducer_call(before) is None  # no DDP bucket yet: nothing to rebuild


def test_the_rank_whose_call_a_rank_test_further_out_put_there_is_blamed(tmp_path):
    found = diagnose(_job(tmp_path)[0]).findings
    first = next(f for f in found if f.severity.value == "error")
    assert first.kind == "collective_mismatch" and first.ranks == (0,)
    assert "if rank == 0:" in first.detail and "train.py:12" in first.detail
    assert not any(f.severity.value == "error" and 1 in f.ranks for f in found)


def test_a_line_lint_flagged_tells_the_sides_apart_where_the_source_does_not(tmp_path):
    j, script = _job(tmp_path, lint_only=True)  # no rank test on rank 0's stack
    assert next(f for f in diagnose(j).findings if f.severity.value == "error").ranks == (0, 1)
    j.lint_sites = {("train.py", 6): "rank_dependent_collective"}
    first = next(f for f in diagnose(j).findings if f.severity.value == "error")
    assert first.ranks == (0,) and "lint flagged before the run" in first.detail


def test_lint_sites_are_the_flagged_calls_and_the_collectives_a_flagged_return_skips(tmp_path):
    from ddpdoctor.analysis.load.run_dirs import lint_sites
    from ddpdoctor.rundir.lint_results import write_lint_results

    write_lint_results(tmp_path, [
        {"kind": "rank_dependent_collective", "severity": "error", "file": "/x/train.py",
         "line": 27, "message": "log() runs only where ..."},
        {"kind": "rank_dependent_skip", "severity": "error", "file": "/x/cb.py", "line": 11,
         "message": "`return` under the condition on line 10 skips all_reduce (line 13) "
                    "that the other ranks still call"},
        {"kind": "unused_parameters", "severity": "warning", "file": "/x/train.py",
         "line": 5, "message": "..."}])
    assert lint_sites(tmp_path) == {("train.py", 27): "rank_dependent_collective",
                                    ("cb.py", 13): "rank_dependent_skip"}
