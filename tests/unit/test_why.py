"""Why, not only who, on hand-built jobs: the skipped iteration and its `continue`, the
`break` of a rank that left the loop alone, and an implicit collective's mechanism."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.explain.why import mechanism
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.align.iterations import skipped_iterations
from ddpdoctor.analysis.model import Call, Severity
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from tests.unit.factory import job, rank, rec

BUCKET = int(L.RecordFlag.BUCKET)
TRAIN = """import torch
def main(loader, model, opt, rank):
    best = 1e9
    for epoch in range(2):
        for x, y in loader:
            loss = model(x, y)
            if not torch.isfinite(loss):
                continue
            loss.backward()
            opt.step()
        val = evaluate(model)
        if val >= best:
            break
        best = val
"""


def _script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return str(path)


def batch(i: int, t: float, epoch: int = 0):
    return rec(i, "batch", t=t, kind=L.RecordKind.BATCH, site="0:-:-", aux=epoch)


def test_a_rank_that_skipped_a_batchs_backward_is_named_with_its_continue(tmp_path) -> None:
    site = f"{_script(tmp_path)}:9"
    r0, r1, seq = [], [], 0
    for i in range(4):
        r0 += [batch(i, i), rec(i, t=i + 0.5, site=site, flags=BUCKET, shape=(18,))]
        r1.append(batch(i, i))
        if i != 1:  # rank 1 skips batch 1's backward
            r1.append(rec(seq, t=i + 0.5, site=site, flags=BUCKET, shape=(18,)))
            seq += 1
    r0.append(batch(4, 4))
    r0.append(rec(4, t=4.5, site=site, flags=BUCKET, shape=(18,), dur=None))
    r1.append(batch(4, 4))
    j = job([rank(0, r0), rank(1, r1, L.RankState.EXITED)])
    [skip] = skipped_iterations(j)
    assert skip.ranks == (1,) and (skip.epoch, skip.batch) == (0, 1)
    first = [f for f in analyze(j, []) if f.severity == Severity.ERROR][0]
    assert first.ranks == (1,)
    ev = first.evidence["skipped_iteration"]
    assert ev["callsite"].endswith("train.py:8") and ev["statement"] == "continue"
    assert ev["condition"] == "`if not torch.isfinite(loss):`"
    assert ev["decided_by"] == "its own data"
    assert "all-reduce the flag" in first.fix


def test_no_skip_when_every_rank_made_each_batchs_calls(tmp_path) -> None:
    site = f"{_script(tmp_path)}:9"
    runs = [rank(r, [x for i in range(3) for x in (batch(i, i), rec(i, t=i + .5, site=site,
                                                                   flags=BUCKET))] +
                 [batch(3, 3)], L.RankState.EXITED) for r in range(2)]
    assert skipped_iterations(job(runs, outcome="completed")) == []


def test_a_rank_that_left_the_loop_alone_is_named_with_its_break(tmp_path) -> None:
    site = f"{_script(tmp_path)}:9"
    r0 = rank(0, [rec(i, t=i, site=site, flags=BUCKET) for i in range(4)] +
              [rec(4, t=4, site=site, flags=BUCKET, dur=None)])
    r1 = rank(1, [rec(i, t=i, site=site, flags=BUCKET) for i in range(4)], L.RankState.EXITED)
    first = [f for f in analyze(job([r0, r1]), []) if f.severity == Severity.ERROR][0]
    assert first.ranks == (1,) and first.kind in ("missing_collective", "uneven_batches")
    ev = first.evidence["loop_exit"]
    assert ev["statement"] == "break" and ev["callsite"].endswith("train.py:13")
    assert ev["decided_by"] == "its own validation score"
    assert "left the loop alone" in first.summary


def test_implicit_collectives_are_told_by_their_api() -> None:
    call = Call(rank=0, group="0", seq=3, op="broadcast", in_shapes=((16,),),
                dtypes=("float32",), peer=0, callsite="t.py:4", t_start=1,
                kind=L.RecordKind.COLLECTIVE,
                framework_site="torch/nn/parallel/distributed.py:2363",
                origin=Origin.DDP_FORWARD)
    text = mechanism(call)
    assert "DDP's forward" in text and "broadcasts the module's buffers" in text
    user = Call(rank=0, group="0", seq=3, op="all_reduce", reduce_op="sum", in_shapes=((1,),),
                dtypes=("float32",), callsite="t.py:4", t_start=1)
    assert mechanism(user) == ""
