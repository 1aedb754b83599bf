"""ddpdoctor's DistributedDataParallel (torch's, with the ring comm hook) trains exactly as
torch's plain DDP, in real gloo jobs.

Each world size runs one job in which every case trains the same model on the same data
twice, once under torch's DDP and once under ddpdoctor's, and reports the largest
difference between the two sets of parameters and buffers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.integration.spawned import end_job, run_job

STEPS = 4
TOL = 1e-6


# -- models ----------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, width), nn.Linear(width, width), nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 6 * 6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


class Unused(nn.Module):
    """``never`` is unused everywhere; ``some`` only on rank 0 at even steps; ``side``
    feeds a second output that the loss ignores."""

    def __init__(self):
        super().__init__()
        self.a, self.some, self.never, self.side = (nn.Linear(8, 8), nn.Linear(8, 8),
                                                    nn.Linear(8, 8), nn.Linear(8, 2))
        self.head = nn.Linear(8, 4)
        self.step = 0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.a(x))
        if dist.get_rank() == 0 and self.step % 2 == 0:
            h = h + self.some(h)
        self.step += 1
        return self.head(h), self.side(h)


class Frozen(MLP):
    def __init__(self):
        super().__init__()
        self.b.requires_grad_(False)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 16, bias=False)
        self.mid = nn.Linear(16, 16)
        self.dec = nn.Linear(16, 8, bias=False)
        self.dec.weight = nn.Parameter(self.enc.weight.t().contiguous())
        self.enc.weight = self.dec.weight  # one object under two names (tied)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.mid(x @ self.enc.weight))
        return self.dec(h)


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16).double()
        self.c = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x)).double()
        return self.c(torch.relu(self.b(h)).float())


class Reordered(nn.Module):
    """Layers registered in another order than they run: buckets must be rebuilt."""

    def __init__(self):
        super().__init__()
        self.last = nn.Linear(64, 4)
        self.first = nn.Linear(8, 64)
        self.middle = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.middle(torch.relu(self.first(x)))))


def _loss(out: Any) -> torch.Tensor:
    return (out[0] if isinstance(out, tuple) else out).square().mean()


def _batch(case: str, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    shape = (4, 3, 8, 8) if case.startswith("cnn") else (4, 8)
    return torch.randn(shape, generator=g)


# case -> (model factory, DDP kwargs, train options)
CASES: dict[str, tuple[Callable[[], nn.Module], dict[str, Any], dict[str, Any]]] = {
    "mlp": (MLP, {}, {}),
    "mlp_zero_grad_keep": (MLP, {}, {"set_to_none": False}),
    "mlp_small_buckets": (lambda: MLP(64), {"bucket_cap_mb": 0.005}, {}),
    "reordered_rebuild": (Reordered, {"bucket_cap_mb": 0.01}, {}),
    "cnn_bn": (CNN, {}, {}),
    "cnn_bn_no_broadcast": (CNN, {"broadcast_buffers": False}, {}),
    "unused": (Unused, {"find_unused_parameters": True}, {"weight_decay": 0.01}),
    "unused_keep_grads": (Unused, {"find_unused_parameters": True}, {"set_to_none": False}),
    "no_sync": (MLP, {}, {"accumulate": 2}),
    "no_sync_unused": (Unused, {"find_unused_parameters": True}, {"accumulate": 2}),
    "frozen": (Frozen, {}, {}),
    "tied": (Tied, {}, {}),
    "mixed_dtypes": (Mixed, {}, {}),
    "grad_as_bucket_view": (MLP, {"gradient_as_bucket_view": True},
                            {"set_to_none": False}),
}


def _train(ddp_cls: type, case: str, rank: int, model: nn.Module) -> nn.Module:
    _, kwargs, opts = CASES[case]
    ddp = ddp_cls(model, **kwargs)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9,
                          weight_decay=opts.get("weight_decay", 0.0))
    accumulate = opts.get("accumulate", 0)
    for step in range(STEPS):
        for micro in range(accumulate):
            with ddp.no_sync():
                _loss(ddp(_batch(case, rank, 100 * step + micro))).backward()
        _loss(ddp(_batch(case, rank, step))).backward()
        opt.step()
        opt.zero_grad(set_to_none=opts.get("set_to_none", True))
    return ddp


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb), (list(sa), list(sb))
    diff = 0.0
    for k in sa:
        if sa[k].is_floating_point():
            diff = max(diff, (sa[k].double() - sb[k].double()).abs().max().item())
    return diff


def _ring_hooked(ddp: nn.Module) -> bool:
    """torch's DDP class, with ddpdoctor's ring summing its buckets."""
    from ddpdoctor.ddp import comm_hook

    state = comm_hook.state_of(ddp)
    return (isinstance(ddp, nn.parallel.DistributedDataParallel) and state is not None
            and state.mode is comm_hook.HookMode.RING and state.user is None)


class _TorchMode(nn.parallel.DistributedDataParallel):
    """torch's DDP as `ddpdoctor run --ddp torch` has it on gloo: torch's reducer as it is,
    built on ddpdoctor's recording process group (no comm hook)."""

    def __init__(self, *args: Any, **kwargs: Any):
        from ddpdoctor.ddp import recorded_group

        with recorded_group.recording_reducer(self):
            super().__init__(*args, **kwargs)


def _recorded_by_group(ddp: nn.Module) -> bool:
    from ddpdoctor.ddp import comm_hook, recorded_group

    return recorded_group.group_of(ddp) is not None and comm_hook.state_of(ddp) is None


def _grads_match(a: nn.Module, b: nn.Module) -> bool:
    """Same parameters have (or lack) a grad after the last step."""
    return [p.grad is None for p in a.parameters()] == [p.grad is None for p in b.parameters()]


def equivalence_job(rank: int, world: int, port: int, out_dir: str, cases: list[str]) -> None:
    import ddpdoctor

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    results: dict[str, Any] = {}
    for case in cases:
        torch.manual_seed(rank)  # different on every rank: DDP's broadcast must fix it
        model = CASES[case][0]()
        twin = copy.deepcopy(model)
        third = copy.deepcopy(model)
        ours = _train(ddpdoctor.DistributedDataParallel, case, rank, model)
        theirs = _train(nn.parallel.DistributedDataParallel, case, rank, twin)
        torch_mode = _train(_TorchMode, case, rank, third)  # --ddp torch
        results[case] = {"diff": _max_diff(ours, theirs),
                         "grads_match": _grads_match(ours, theirs),
                         "ours_is_ddpdoctor": _ring_hooked(ours),
                         "torch_mode_diff": _max_diff(torch_mode, theirs),
                         "torch_mode_grads_match": _grads_match(torch_mode, theirs),
                         "torch_mode_grouped": _recorded_by_group(torch_mode)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    end_job()


_results: dict[int, list[dict[str, Any]]] = {}


def results_for(world: int, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    if world not in _results:
        out = tmp_path_factory.mktemp(f"ddp_eq_w{world}")
        run_job(equivalence_job, world, str(out), list(CASES))
        _results[world] = [json.loads((out / f"rank{r}.json").read_text())
                           for r in range(world)]
    return _results[world]


SLOW = pytest.mark.slow
WORLDS = [1, 2, pytest.param(3, marks=SLOW), pytest.param(4, marks=SLOW)]


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("case", list(CASES))
def test_trains_like_torch_ddp(case: str, world: int,
                               tmp_path_factory: pytest.TempPathFactory) -> None:
    for rank, res in enumerate(results_for(world, tmp_path_factory)):
        r = res[case]
        assert r["ours_is_ddpdoctor"], "ddpdoctor fell back to torch's DDP"
        assert r["diff"] <= TOL, f"rank {rank}: parameters differ by {r['diff']:.3g}"
        assert r["grads_match"], f"rank {rank}: .grad is None on different parameters"
        assert r["torch_mode_grouped"], "--ddp torch: the reducer is not on the recording group"
        # --ddp torch is torch's reducer as it is: torch's bits, at any world size.
        assert r["torch_mode_diff"] == 0.0, \
            f"rank {rank}, --ddp torch: parameters differ by {r['torch_mode_diff']:.3g}"
        assert r["torch_mode_grads_match"], f"rank {rank}, --ddp torch: .grad differ"


# -- behaviour beyond the numbers ------------------------------------------------------
def behaviour_job(rank: int, world: int, port: int, out_dir: str) -> None:
    import ddpdoctor

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    res: dict[str, Any] = {}
    for name, cls in (("error", ddpdoctor.DistributedDataParallel),
                      ("torch_mode_error", _TorchMode)):
        model = cls(Unused(), bucket_cap_mb=0.0001)  # find_unused_parameters=False
        _loss(model(_batch("mlp", rank, 0))).backward()  # 'never' gets no grad
        torch.optim.SGD(model.parameters(), lr=0.1).step()  # settles the open round
        try:
            model(_batch("mlp", rank, 1))
            res[name] = ""
        except RuntimeError as e:
            res[name] = str(e)
    from ddpdoctor.ddp import swap as ddp_swap

    torch_cls = nn.parallel.DistributedDataParallel
    ddp_swap.install("ring")  # what `ddpdoctor run` does: torch's class gets our hook
    plain = nn.parallel.DistributedDataParallel(MLP())
    res["state_keys"] = list(plain.state_dict())
    res["isinstance"] = (type(plain) is torch_cls and _ring_hooked(plain)
                         and isinstance(plain, nn.Module))
    res["torch_isinstance"] = isinstance(ddpdoctor.DistributedDataParallel(MLP()), torch_cls)
    x = _batch("mlp", rank, 2)
    res["forward_same"] = torch.equal(plain(x), plain.module(x))
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hooked = nn.parallel.DistributedDataParallel(MLP())  # the user's hook replaces ours
    hooked.register_comm_hook(None, default_hooks.allreduce_hook)
    _loss(hooked(_batch("mlp", rank, 3))).backward()
    grad = hooked.module.a.weight.grad.clone()
    dist.all_reduce(grad)
    res["hook_grads_averaged"] = torch.allclose(grad / world, hooked.module.a.weight.grad)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    end_job()


def test_missing_find_unused_parameters_raises_torchs_error(tmp_path: Path) -> None:
    run_job(behaviour_job, 2, str(tmp_path))
    for r in range(2):
        res = json.loads((tmp_path / f"rank{r}.json").read_text())
        for name in ("error", "torch_mode_error"):
            assert "Expected to have finished reduction in the prior iteration" in res[name]
            assert "find_unused_parameters=True" in res[name]
            assert f"did not receive grad for rank {r}: " in res[name]
        assert res["state_keys"] == ["module.a.weight", "module.a.bias", "module.b.weight",
                                     "module.b.bias", "module.c.weight", "module.c.bias"]
        assert res["isinstance"] and res["torch_isinstance"] and res["forward_same"]
        assert res["hook_grads_averaged"]
