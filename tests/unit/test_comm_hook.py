"""ddpdoctor's DDP comm hook on torch's own DDP, in a one-rank gloo group in this process:
the class stays torch's, a user's hook replaces ours, copies get their own hook, notices
are said once."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpdoctor.ddp import comm_hook
from ddpdoctor.ddp.wrapper import DistributedDataParallel
from ddpdoctor.runtime import notices


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _step(ddp: nn.Module) -> None:
    ddp(torch.ones(2, 4)).sum().backward()


def test_library_ddp_is_torchs_class_with_the_ring_hook(group) -> None:
    ddp = DistributedDataParallel(nn.Linear(4, 2))
    assert isinstance(ddp, nn.parallel.DistributedDataParallel)
    state = comm_hook.state_of(ddp)
    assert state is not None and state.mode is comm_hook.HookMode.RING and state.user is None
    _step(ddp)
    assert torch.equal(ddp.module.weight.grad, torch.full((2, 4), 2.0))
    assert "comm_hook" not in ddp._get_ddp_logging_data()  # ours is invisible to torch
    grads = [p.grad.untyped_storage().data_ptr() for p in ddp.parameters()]
    assert grads[0] != grads[1]  # gradient_as_bucket_view=False: grads are not bucket views
    viewed = DistributedDataParallel(nn.Linear(4, 2), gradient_as_bucket_view=True)
    _step(viewed)
    grads = [p.grad.untyped_storage().data_ptr() for p in viewed.parameters()]
    assert grads[0] == grads[1]  # both live in the one bucket


def test_user_hook_replaces_ours_and_a_second_one_is_refused(group) -> None:
    ddp = DistributedDataParallel(nn.Linear(4, 2))
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    state = comm_hook.state_of(ddp)
    assert state.user == (default_hooks.allreduce_hook, None)
    assert ddp._comm_hooks == [(default_hooks.allreduce_hook, None)]
    assert ddp._get_ddp_logging_data()["comm_hook"] == "allreduce_hook"
    _step(ddp)
    assert torch.equal(ddp.module.bias.grad, torch.full((2,), 2.0))
    with pytest.raises(RuntimeError, match="can only be called once"):
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)


def test_builtin_hook_becomes_its_python_twin(group) -> None:
    ddp = DistributedDataParallel(nn.Linear(4, 2))
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
    assert comm_hook.state_of(ddp).user[0] is default_hooks.fp16_compress_hook
    _step(ddp)
    assert torch.equal(ddp.module.bias.grad, torch.full((2,), 2.0))


def test_copies_get_their_own_hook_and_keep_none_of_ours(group) -> None:
    ddp = DistributedDataParallel(nn.Linear(4, 2))
    _step(ddp)
    buf = io.BytesIO()
    torch.save(ddp, buf)
    buf.seek(0)
    copies = [copy.deepcopy(ddp), pickle.loads(pickle.dumps(ddp)),
              torch.load(buf, weights_only=False)]
    for twin in copies:
        assert type(twin) is DistributedDataParallel
        state = comm_hook.state_of(twin)
        assert state is not None and state is not comm_hook.state_of(ddp)
        assert not any(isinstance(v, comm_hook.HookState) for v in vars(twin).values())
        twin.zero_grad()
        _step(twin)
        assert torch.equal(twin.module.bias.grad, torch.full((2,), 2.0))


def test_a_notice_is_said_once(capsys) -> None:
    text = "a test notice nobody else gives"
    notices.notice(text)
    notices.notice(text)
    assert capsys.readouterr().err.count(f"ddpdoctor: notice: {text}") == 1


class _ThreeLayers(nn.Module):
    def __init__(self, skip_middle: bool = False):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 64), nn.Linear(64, 64), nn.Linear(64, 64)
        self.skip_middle = skip_middle

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.c(h if self.skip_middle else torch.relu(self.b(h)))


def _torch_mode(model: nn.Module) -> nn.Module:
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)  # a bucket a layer
    comm_hook.attach(ddp, comm_hook.HookMode.ALLREDUCE)
    return ddp


def test_torch_mode_completes_every_bucket_at_the_last_one(group) -> None:
    """--ddp torch: CPU buckets' futures are completed by the last bucket's hook, on the
    backward's thread; the gradients are torch's."""
    torch.manual_seed(0)
    ddp = _torch_mode(_ThreeLayers())
    twin = nn.parallel.DistributedDataParallel(copy.deepcopy(ddp.module), bucket_cap_mb=0.01)
    state = comm_hook.state_of(ddp)
    launched = []
    real_launch = state.deferred.launch
    state.deferred.launch = lambda *a: launched.append(a[3:]) or real_launch(*a)
    for _ in range(2):  # torch rebuilds the buckets after the first step: 3 from then on
        launched.clear()
        for model in (ddp, twin):
            model.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
    assert len(launched) == 3 and launched[-1][1] and not any(last for _, last in launched[:-1])
    assert state.deferred._entries == []
    for mine, theirs in zip(ddp.parameters(), twin.parameters()):
        assert torch.equal(mine.grad, theirs.grad)


def test_a_round_whose_last_bucket_never_comes_is_settled_at_the_optimizer_step(group) -> None:
    """An unused parameter without find_unused_parameters: the reducer never launches the
    buckets from it on; those it launched are completed (their records ended) at the next
    optimizer step, and torch raises its own error at the next forward."""
    ddp = _torch_mode(_ThreeLayers())
    ddp(torch.ones(3, 4)).sum().backward()  # torch rebuilds the buckets after this step
    ddp.module.skip_middle = True
    state = comm_hook.state_of(ddp)
    ended = []
    state.deferred._end = lambda handle, failed=False: ended.append(failed)
    ddp(torch.ones(3, 4)).sum().backward()
    pending = list(state.deferred._entries)
    assert pending and not any(e.fut.done() for e in pending)
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    assert state.deferred._entries == []  # settled: done ones here, the rest on gloo's thread
    for e in pending:
        e.fut.wait()
    assert ended == [False] * len(pending)
    with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
        ddp(torch.ones(3, 4))


class _FailedWork:
    """Stands in for a bucket's all-reduce that failed (a peer closed its connection)."""

    def is_completed(self) -> bool:
        return True

    def wait(self) -> bool:
        raise RuntimeError("[gloo] Connection closed by peer")


def test_a_failed_bucket_is_raised_from_the_last_hook_and_fails_the_rest() -> None:
    from ddpdoctor.ddp.deferred import Deferred

    ended = []
    d = Deferred(lambda handle, failed=False: ended.append((handle, failed)))
    first = d.launch(_FailedWork(), torch.zeros(2), 7, 0, False)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        d.launch(_FailedWork(), torch.zeros(2), 8, 1, True)
    assert ended == [(7, True), (8, True)]
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        first.wait()
