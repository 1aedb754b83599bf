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


READY_TWICE = (
    "Expected to mark a variable ready only once. This error is caused by one of the following "
    "reasons: 1) Use of a module parameter outside the `forward` function. Please make sure "
    "model parameters are not shared across multiple concurrent forward-backward passes. or "
    "try to use _set_static_graph() as a workaround if this module graph does not change "
    "during training loop.2) Reused parameters in multiple reentrant backward passes. For "
    "example, if you use multiple `checkpoint` functions to wrap the same part of your model, "
    "it would result in the same set of parameters been used by different reentrant backward "
    "passes multiple times, and hence marking a variable ready multiple times. DDP does not "
    "support such use cases in default. You can try to use _set_static_graph() as a workaround "
    "if your module graph does not change over iterations.\n"
    "Parameter at index {i}{name} has been marked as ready twice. This means that multiple "
    "autograd engine  hooks have fired for this particular parameter during this iteration.")
USER_BACKWARD = {"filename": "/x/train.py", "line": 67, "name": "main"}
TORCH = "/x/site-packages/torch/"
REENTRANT_BACKWARD = [USER_BACKWARD,
                      {"filename": TORCH + "_tensor.py", "line": 623, "name": "backward"},
                      {"filename": TORCH + "autograd/function.py", "line": 325, "name": "apply"},
                      {"filename": TORCH + "utils/checkpoint.py", "line": 331,
                       "name": "backward"},
                      {"filename": TORCH + "autograd/graph.py", "line": 979,
                       "name": "_engine_run_backward"}]
PLAIN_BACKWARD = [USER_BACKWARD,
                  {"filename": TORCH + "_tensor.py", "line": 623, "name": "backward"},
                  {"filename": TORCH + "autograd/graph.py", "line": 979,
                   "name": "_engine_run_backward"}]


def ready_twice_job(traceback: list[dict], index: int = 1, name: str = "",
                    options: dict | None = None, step: int = 2) -> list:
    """Both ranks raise "marked ready twice" of parameter ``index`` in their backward."""
    meta = [{**table_event(TwoHeads()), "options": options or {}}]
    exc = {"type": "RuntimeError", "traceback": traceback,
           "message": READY_TWICE.format(i=index, name=f" with name {name}" if name else "")}
    return [rank(r, steps(step), L.RankState.FAILED, exception=exc, meta=meta, step=step)
            for r in (0, 1)]


def test_reentrant_checkpoint_ready_twice_names_the_module_the_ranks_and_use_reentrant_false(
) -> None:
    found = analyze(job(ready_twice_job(REENTRANT_BACKWARD), outcome="failed"), [])
    errs = errors(found)
    assert len(errs) == 1, [(f.kind, f.ranks, f.summary) for f in found]
    [f] = errs
    assert f.kind == "rank_failed" and f.ranks == (0, 1)
    # index 1 named by the table recorded at DDP construction (torch gave no name)
    assert f.evidence["parameters"] == ["body.bias"] and f.evidence["indices"] == [1]
    assert f.evidence["module"] == "body"
    assert f.evidence["module_parameters"] == ["body.weight", "body.bias"]
    assert f.evidence["ranks"] == [0, 1] and f.evidence["iteration"] == 2
    assert f.evidence["checkpoint"] is True
    assert ("parameter `body.bias` (module `body`, with `body.weight`) was marked ready twice "
            "on ranks 0 and 1 in iteration 2, because the reentrant activation checkpoint "
            "(use_reentrant=True) re-ran the forward in backward") in f.summary
    assert "the same module checkpointed twice" in f.summary
    assert f.fix.startswith("Use non-reentrant activation checkpointing")
    assert "use_reentrant=False" in f.fix and "static_graph=True" in f.fix
    assert "find_unused_parameters" not in f.fix
    assert "nested backward pass" in f.detail and "/x/train.py:67" in f.detail


def test_reentrant_checkpoint_under_find_unused_parameters_says_its_search_marked_them() -> None:
    runs = ready_twice_job(REENTRANT_BACKWARD, index=4, name="aux.weight",
                           options={"find_unused_parameters": True})
    [f] = errors(analyze(job(runs, outcome="failed"), []))
    assert f.evidence["parameters"] == ["aux.weight"] and f.evidence["module"] == "aux"
    assert f.evidence["find_unused_parameters"] is True
    assert "find_unused_parameters=True had marked them ready as unused" in f.summary
    assert f.fix.startswith("Use non-reentrant activation checkpointing")
    assert "drop find_unused_parameters=True" in f.fix


def test_ready_twice_without_a_checkpoint_in_the_traceback_gets_no_checkpoint_advice() -> None:
    [f] = errors(analyze(job(ready_twice_job(PLAIN_BACKWARD, index=0), outcome="failed"), []))
    assert f.ranks == (0, 1) and f.evidence["parameters"] == ["body.weight"]
    assert f.evidence["checkpoint"] is False
    assert "marked ready twice" in f.summary and "two backward passes" in f.summary
    assert "checkpoint" not in f.summary and "use_reentrant" not in f.fix
    assert "static_graph=True" in f.fix


def test_ready_twice_without_a_traceback_gives_the_checkpoint_fix_as_a_condition() -> None:
    [f] = errors(analyze(job(ready_twice_job([], index=0), outcome="failed"), []))
    assert f.evidence["checkpoint"] is None
    assert "If this module is checkpointed" in f.fix and "use_reentrant=False" in f.fix
    assert not f.fix.startswith("Use non-reentrant")


def test_the_index_is_named_by_the_table_and_without_one_by_torchs_name() -> None:
    with_table = ready_twice_job(REENTRANT_BACKWARD, index=5, name="aux.bias")
    [f] = errors(analyze(job(with_table, outcome="failed"), []))
    assert f.evidence["parameters"] == ["aux.bias"]
    bare = [rank(r, steps(1), L.RankState.FAILED, step=1, exception={
        "type": "RuntimeError", "traceback": REENTRANT_BACKWARD,
        "message": READY_TWICE.format(i=7, name=" with name enc.layer.fc.bias")})
        for r in (0, 1)]
    [g] = errors(analyze(job(bare, outcome="failed"), []))
    assert g.evidence["parameters"] == ["enc.layer.fc.bias"]
    assert g.evidence["module"] == "enc.layer.fc"
    assert g.evidence["module_parameters"] == ["enc.layer.fc.bias"]


def test_the_same_words_in_another_error_class_are_not_a_reducer_error() -> None:
    runs = ready_twice_job(REENTRANT_BACKWARD)
    for run in runs:
        for e in run.trace.meta_events("exception"):
            e["type"] = "ValueError"
    found = errors(analyze(job(runs, outcome="failed"), []))
    assert found and all("mechanism" not in f.evidence for f in found)


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


def test_one_of_two_ranks_froze_a_parameter_the_freezer_is_named_even_rank_0() -> None:
    """1 against 1: no majority; the rank that froze (requires_grad=True is the default)
    is the odd one, whichever its number; a reshape 1 against 1 names both sides."""
    frozen = TwoHeads()
    frozen.aux.weight.requires_grad_(False)
    [f] = errors(analyze(job(construction_job(frozen, world=2, odd=0), outcome="failed"), []))
    assert f.ranks == (0,) and "frozen on rank 0 only" in f.summary, f.summary
    wide = TwoHeads()
    wide.head = nn.Linear(16, 3)
    [f] = errors(analyze(job(construction_job(wide, world=2, odd=0), outcome="failed"), []))
    assert f.ranks == (0, 1) and "nothing singles one out" in f.summary, f.summary


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
    from ddpdoctor.analysis.load.frames import ddpdoctor_frame
    assert ddpdoctor_frame("/elsewhere/ddpdoctor/runtime/patches.py")
    assert ddpdoctor_frame("/a/ddpdoctor/ddpdoctor/analysis/causal/graph.py")
    assert not ddpdoctor_frame("/home/u/ddpdoctor/train.py")
    assert not ddpdoctor_frame("/home/u/ddpdoctor/")
