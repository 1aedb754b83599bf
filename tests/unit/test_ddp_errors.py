"""DDP's own errors in plain words, on hand-built jobs: reducer indices named by module path,
the construction check as one finding on the odd rank, no ddpdoctor frame quoted."""

from __future__ import annotations

from torch import nn

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.ddp.swap import parameter_table
from ddpdoctor.trace import layout as L
from tests.unit.factory import job, rank, rec, steps

FAILED = int(L.RecordFlag.FAILED)
CLOSED = {"type": "RuntimeError", "message": "[gloo] Connection closed by peer [127.0.0.1]:1"}
UNFINISHED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. "
    "This error indicates that your module has parameters that were not used in producing "
    "loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by \n"
    "making sure all `forward` function outputs participate in calculating loss. \n"
    "Parameter indices which did not receive grad for rank {r}: 4 5\n"
    " In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either "
    "INFO or DETAIL to print out information")


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 2)
        self.aux = nn.Linear(16, 2)


def table_event(model: nn.Module) -> dict:
    return {"event": "ddp_params", "t": 0, **parameter_table(model)}


def errors(found):
    return [f for f in found if f.severity == Severity.ERROR]


def test_parameter_table_follows_the_reducers_order_and_skips_frozen_ones() -> None:
    m = TwoHeads()
    m.head.bias.requires_grad_(False)
    t = parameter_table(m)
    assert t["reducer"] == ["body.weight", "body.bias", "head.weight", "aux.weight", "aux.bias"]
    assert ["head.bias", [2], False] in t["params"]


def test_unused_parameter_on_one_rank_names_it_the_rank_and_the_iteration() -> None:
    meta = [table_event(TwoHeads())]
    exc = {"type": "RuntimeError", "message": UNFINISHED.format(r=1)}
    r0 = rank(0, steps(3) + [rec(3, t=3, dur=2, flags=FAILED)], L.RankState.FAILED,
              exception=CLOSED, meta=meta, step=3)
    r1 = rank(1, steps(3), L.RankState.FAILED, exception=exc, meta=meta, step=4)
    found = analyze(job([r0, r1], outcome="failed"), [])
    errs = errors(found)
    assert len(errs) == 1, [(f.kind, f.ranks, f.summary) for f in found]
    f = errs[0]
    assert f.kind == "rank_failed" and f.ranks == (1,)
    assert f.evidence["parameters"] == ["aux.weight", "aux.bias"]
    assert f.evidence["ranks"] == [1] and f.evidence["iteration"] == 3
    assert "`aux.weight`" in f.summary and "iteration 3" in f.summary
    assert "the other ranks used them" in f.summary
    assert "branch" in f.fix and "find_unused_parameters=True" in f.fix
    assert f.evidence["consequences"] == {"0": CLOSED["type"] + ": " + CLOSED["message"]}


def test_parameters_unused_on_every_rank_suggest_find_unused_parameters() -> None:
    meta = [table_event(TwoHeads())]
    runs = [rank(r, steps(1), L.RankState.FAILED, step=1, meta=meta,
                 exception={"type": "RuntimeError", "message": UNFINISHED.format(r=r)})
            for r in (0, 1)]
    [f] = errors(analyze(job(runs, outcome="failed"), []))
    assert f.ranks == (0, 1) and f.evidence["iteration"] == 0
    assert f.fix.startswith("Pass find_unused_parameters=True")
    assert "static_graph=True" in f.fix


def test_without_a_table_the_indices_are_said_as_indices() -> None:
    exc = {"type": "RuntimeError", "message": UNFINISHED.format(r=1)}
    r0 = rank(0, steps(2), L.RankState.FAILED, exception=CLOSED)
    r1 = rank(1, steps(2), L.RankState.FAILED, exception=exc, step=2)
    [f] = errors(analyze(job([r0, r1], outcome="failed"), []))
    assert f.evidence["parameters"] == ["parameter #4", "parameter #5"]


def test_marked_ready_twice_under_reentrant_checkpointing_suggests_use_reentrant_false() -> None:
    meta = [table_event(TwoHeads())]
    exc = {"type": "RuntimeError", "message": "Expected to mark a variable ready only once. "
           "This error is caused by ...\nParameter at index 0 has been marked as ready twice. "
           "This means that multiple autograd engine hooks have fired",
           "traceback": [{"filename": "train.py", "line": 40, "name": "main"},
                         {"filename": "/x/site-packages/torch/utils/checkpoint.py",
                          "line": 300, "name": "backward"}]}
    runs = [rank(r, steps(1), L.RankState.FAILED, exception=exc, meta=meta, step=1)
            for r in (0, 1)]
    [f] = errors(analyze(job(runs, outcome="failed"), []))
    assert f.evidence["parameters"] == ["body.weight"]
    assert "use_reentrant=False" in f.fix and "marked ready twice" in f.summary


def construction_job(odd_model: nn.Module, world: int = 3, odd: int = 1) -> list:
    good = table_event(TwoHeads())
    runs = []
    for r in range(world):
        meta = [table_event(odd_model)] if r == odd else [good]
        n = len(parameter_table(odd_model)["reducer"] if r == odd else good["reducer"])
        other = 0 if r != 0 else odd
        msg = (f"DDP expects same model across all ranks, but Rank {r} has {n} params, while "
               f"rank {other} has inconsistent 5 params.")
        runs.append(rank(r, [], L.RankState.FAILED, world=world, meta=meta, exception={
            "type": "RuntimeError", "message": msg, "traceback": [
                {"filename": "/x/train.py", "line": 20, "name": "main"},
                {"filename": "/work/main/ddpdoctor/ddp/swap.py", "line": 69,
                 "name": "__init__"}]}))
    return runs


def test_a_parameter_frozen_on_one_rank_is_one_finding_naming_that_rank() -> None:
    frozen = TwoHeads()
    frozen.aux.weight.requires_grad_(False)
    found = analyze(job(construction_job(frozen), outcome="failed"), [])
    errs = errors(found)
    assert len(errs) == 1, [(f.kind, f.ranks, f.summary) for f in found]
    f = errs[0]
    assert f.kind == "rank_failed" and f.ranks == (1,)
    assert "`aux.weight` has requires_grad=False on rank 1" in f.summary
    assert f.evidence["differences"][0]["parameter"] == "aux.weight"
    assert set(f.evidence["consequences"]) == {"0", "2"}
    assert "ddpdoctor/ddp" not in f.detail


def test_a_parameter_reshaped_on_one_rank_names_its_shapes() -> None:
    wide = TwoHeads()
    wide.head = nn.Linear(16, 3)
    [f] = errors(analyze(job(construction_job(wide, odd=2), outcome="failed"), []))
    assert f.ranks == (2,)
    assert "`head.weight` has shape [3, 16] on rank 2, [2, 16] on ranks 0 and 1" in f.summary


def test_quoted_tracebacks_leave_out_ddpdoctors_frames() -> None:
    exc = {"type": "ValueError", "message": "bad", "traceback": [
        {"filename": "/x/train.py", "line": 20, "name": "main"},
        {"filename": "/work/main/ddpdoctor/runtime/patches.py", "line": 95, "name": "wrapper"},
        {"filename": "/usr/lib/python3/site-packages/ddpdoctor/ddp/swap.py", "line": 9,
         "name": "__init__"}]}
    r0 = rank(0, steps(2), L.RankState.FAILED, exception=exc)
    r1 = rank(1, steps(2), L.RankState.EXITED)
    [f] = errors(analyze(job([r0, r1], outcome="failed"), []))
    assert "/x/train.py:20" in f.detail and "ddpdoctor" not in f.detail


def test_own_frames_are_known_from_any_checkout_but_a_users_file_is_kept() -> None:
    from ddpdoctor.analysis.causal.facts import ddpdoctor_frame
    assert ddpdoctor_frame("/elsewhere/ddpdoctor/runtime/patches.py")
    assert ddpdoctor_frame("/a/ddpdoctor/ddpdoctor/analysis/causal/graph.py")
    assert not ddpdoctor_frame("/home/u/ddpdoctor/train.py")
    assert not ddpdoctor_frame("/home/u/ddpdoctor/")
