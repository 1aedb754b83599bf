"""`--ddp torch` on gloo: torch's reducer as it is, built on ddpdoctor's recording process
group, in a one-rank gloo group in this process.  The recorder is a stand-in that keeps the
begin / end calls (the trace itself is tested elsewhere)."""

from __future__ import annotations

import copy
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpdoctor.ddp import comm_hook, recorded_group, swap
from ddpdoctor.runtime import recorder
from ddpdoctor.runtime.record_text import describe
from ddpdoctor.trace.reader import decode_text
from ddpdoctor.trace import layout as L
from tests.unit.test_comm_hook import _ThreeLayers

_PATCHED = ("__init__", "__setstate__", "register_comm_hook", "_register_builtin_comm_hook",
            "_match_all_reduce_for_bwd_pass")


class _Records:
    """Stands in for the rank's recorder: what was begun, with which bucket index, and how
    it ended (None while open)."""

    enabled = True
    steps = 0  # optimizer steps (the replica checks read it)
    rank = 0

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def begin(self, op: str, pg: Any, ins: Any, reduce_op: str = "", flags: int = 0,
              aux: int = 0, callsite: str = "", **_: Any) -> int:
        return self.begin_described(op, pg, *describe(ins, (), callsite), reduce_op, flags,
                                    aux=aux)

    def begin_described(self, op: str, pg: Any, text: bytes, numel: int,
                        reduce_op: str = "", flags: int = 0, peer: int = -1, aux: int = 0,
                        **_: Any) -> int:
        _, _, dtypes, callsite, _ = decode_text(text)
        self.calls.append({"op": op, "flags": flags, "aux": aux, "ended": None,
                           "dtype": getattr(torch, dtypes[0]), "numel": numel,
                           "callsite": callsite})
        return len(self.calls) - 1

    def end(self, handle: int, failed: bool = False) -> None:
        self.calls[handle]["ended"] = "failed" if failed else "ok"

    def note_error(self, where: str, error: BaseException) -> None:
        raise AssertionError(f"{where}: {error}")

    def meta(self, event: str, **fields: Any) -> None:
        """(DDP's parameter table and other events: not what these tests look at)"""

    def buckets(self) -> list[tuple[int, str | None]]:
        return [(c["aux"], c["ended"]) for c in self.calls
                if c["flags"] & int(L.RecordFlag.BUCKET)]


@pytest.fixture
def records(monkeypatch) -> _Records:
    rec = _Records()
    monkeypatch.setattr(recorder, "_recorder", rec)
    return rec


@pytest.fixture
def torch_mode(tmp_path):
    """A one-rank gloo group, and torch's DDP class patched as `ddpdoctor run --ddp torch`
    patches it (taken out again after the test)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    cls = nn.parallel.DistributedDataParallel
    swap._patch_ddp_class(cls, comm_hook.HookMode.ALLREDUCE)
    try:
        yield cls
    finally:
        for name in _PATCHED:
            setattr(cls, name, getattr(cls, name).__ddpdoctor_original__)
        dist.destroy_process_group()


THREE = [(0, "ok"), (1, "ok"), (2, "ok")]  # three buckets, each recorded and ended


def _step(ddp: nn.Module, x: torch.Tensor | None = None) -> None:
    ddp(torch.ones(3, 4) if x is None else x).sum().backward()


def _eventually(check: Any, seconds: float = 5.0) -> bool:
    """``check()`` within ``seconds`` (a future's callbacks run on gloo's thread)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_buckets_are_recorded_in_order_and_ended_by_the_end_of_backward(
        torch_mode, records) -> None:
    torch.manual_seed(0)
    model = _ThreeLayers()
    twin = copy.deepcopy(model)
    ddp = torch_mode(model, bucket_cap_mb=0.01)  # a bucket a layer
    assert recorded_group.group_of(ddp) is not None and comm_hook.state_of(ddp) is None
    for step in range(3):  # one bucket at first; torch rebuilds them after the first step
        records.calls.clear()
        _step(ddp, torch.full((3, 4), float(step)))
        assert records.buckets() == ([(0, "ok")] if step == 0 else THREE), records.calls
    assert all(c["op"] == "all_reduce" and c["dtype"] == torch.float32 for c in records.calls)
    assert records.calls[0]["callsite"].startswith(f"{__file__}:")  # the user's backward
    reference = torch_mode.__new__(torch_mode)  # torch's own DDP, unpatched
    torch_mode.__init__.__ddpdoctor_original__(reference, twin, bucket_cap_mb=0.01)
    assert recorded_group.group_of(reference) is None
    for step in range(3):
        _step(reference, torch.full((3, 4), float(step)))
    for mine, theirs in zip(ddp.parameters(), reference.parameters()):
        assert torch.equal(mine.grad, theirs.grad)  # torch's own arithmetic


def test_each_backward_line_names_its_own_buckets(torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    _step(ddp)  # torch rebuilds the buckets after the first pass
    records.calls.clear()
    lines = []
    for _ in range(2):  # each line twice: the kept site and text must follow the line
        ddp(torch.ones(3, 4)).sum().backward(); lines.append(sys._getframe().f_lineno)  # noqa: E702
        ddp(torch.ones(3, 4)).sum().backward(); lines.append(sys._getframe().f_lineno)  # noqa: E702
    sites = [c["callsite"] for c in records.calls]
    assert sites == [f"{__file__}:{line}" for line in lines for _ in range(3)], sites
    assert records.buckets() == THREE * 4


def test_the_used_parameter_map_is_not_a_bucket(torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(skip_middle=True), bucket_cap_mb=0.01,
                     find_unused_parameters=True)
    for _ in range(2):
        records.calls.clear()
        _step(ddp)
        assert len(records.calls) == len(records.buckets()) == 3  # the int map goes unrecorded
        assert all(ended == "ok" for _, ended in records.buckets())


def test_a_backward_that_raised_gets_torchs_own_error_next(torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    _step(ddp)
    _step(ddp)
    records.calls.clear()

    def fail(grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a user's hook failed")

    out = ddp(torch.ones(3, 4))
    handle = ddp.module.a.weight.register_hook(fail)  # the last layer to get its grad
    with pytest.raises(RuntimeError, match="a user's hook failed"):
        out.sum().backward()
    handle.remove()
    assert [aux for aux, _ in records.buckets()] == [0, 1]  # launched before it raised
    with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
        _step(ddp)


def test_a_round_left_open_is_ended_as_its_buckets_complete(torch_mode, records) -> None:
    """The first bucket of a backward pass finds the last pass's buckets still listed (its
    final callbacks never ran): done ones are ended there, the others when they complete."""
    group = recorded_group.RecordedGroup(dist.distributed_c10d._get_default_group())
    done, pending = torch.futures.Future(), torch.futures.Future()
    done.set_result(None)
    for _ in range(2):
        records.begin("all_reduce", None, [torch.zeros(1)], flags=int(L.RecordFlag.BUCKET))
    group._launched, group._task = [(done, 0), (pending, 1)], 12345
    x = torch.ones(2, requires_grad=True)
    x.register_hook(lambda g: group._start(torch._C._current_graph_task_id()) or g)
    (x * 2).sum().backward()
    assert [c["ended"] for c in records.calls] == ["ok", None]
    assert group._launched == [] and group._task == -1  # its own round settled at its end
    pending.set_result(None)
    assert [c["ended"] for c in records.calls] == ["ok", "ok"]


def test_joins_shadow_pass_numbers_its_buckets_afresh(torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    _step(ddp)
    _step(ddp)  # buckets rebuilt
    for _ in range(2):
        records.calls.clear()
        ddp._match_all_reduce_for_bwd_pass()  # what a joined rank runs for each backward
        assert _eventually(lambda: records.buckets() == THREE), records.buckets()


def test_copies_get_a_group_of_their_own(torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    _step(ddp)
    twin = copy.deepcopy(ddp)
    assert recorded_group.group_of(twin) not in (None, recorded_group.group_of(ddp))
    assert not any(isinstance(v, recorded_group.RecordedGroup) for v in vars(twin).values())
    _step(twin)  # a new reducer: its buckets are rebuilt after its first step
    records.calls.clear()
    _step(twin)
    assert records.buckets() == THREE


def test_a_users_hook_runs_as_torch_runs_it_each_bucket_recorded_once(
        torch_mode, records) -> None:
    ddp = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    assert ddp._comm_hooks[0][1] is None  # torch keeps it
    _step(ddp)
    records.calls.clear()
    _step(ddp)
    buckets = records.buckets()
    assert sorted(aux for aux, _ in buckets) == [0, 1, 2] and len(buckets) == 3
    builtin = torch_mode(_ThreeLayers(), bucket_cap_mb=0.01)
    builtin._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    records.calls.clear()
    _step(builtin)  # torch's C++ hook sums on the reducer's (recording) group
    assert records.buckets() == [(0, "ok")] and records.calls[0]["dtype"] == torch.float16


class _Failed:
    def wait(self) -> None:
        raise RuntimeError("[gloo] Connection closed by peer")


def test_a_failed_bucket_fails_the_ones_after_it(records) -> None:
    group = SimpleNamespace(_launched=[(SimpleNamespace(wait=lambda: None), 0), (_Failed(), 1),
                                       (SimpleNamespace(wait=lambda: None), 2)], _task=5)
    for _ in range(3):
        records.begin("all_reduce", None, [torch.zeros(1)], flags=int(L.RecordFlag.BUCKET))
    recorded_group.RecordedGroup._settle(group)  # type: ignore[arg-type]
    assert [c["ended"] for c in records.calls] == ["ok", "failed", "failed"]
    assert group._launched == [] and group._task == -1


def test_every_collective_of_the_group_is_forwarded_from_python() -> None:
    """torch's fallback for a method a Python group lacks takes gloo's queue lock holding
    the GIL, while a gloo thread holding that lock may wait for the GIL (a deadlock)."""
    for name in ("allreduce", "broadcast", "allgather", "reduce_scatter", "barrier",
                 "alltoall_base", "send", "recv"):
        assert getattr(recorded_group.RecordedGroup, name) is not getattr(dist.ProcessGroup,
                                                                          name), name


def test_a_bucket_that_fails_to_launch_is_recorded_failed(tmp_path, records) -> None:
    """The all-reduce is launched before it is recorded: one that raises at its launch (a
    group already broken) still gets its record, begun and ended failed, and the error
    reaches torch's reducer; the next bucket is recorded as before."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        group = recorded_group.RecordedGroup(dist.group.WORLD)
        real = group._pg

        def broken(tensors: Any, opts: Any) -> Any:
            raise RuntimeError("Connection closed by peer")

        group._pg = SimpleNamespace(allreduce=broken)
        with pytest.raises(RuntimeError, match="closed by peer"):
            group.allreduce([torch.ones(3)], dist.AllreduceOptions())
        assert records.buckets() == [(0, "failed")]
        group._pg = real
        group.allreduce([torch.ones(3)], dist.AllreduceOptions()).wait()
        assert _eventually(lambda: records.buckets() == [(0, "failed"), (1, "ok")])
    finally:
        dist.destroy_process_group()
