"""Healthy DDP training with every way of stepping an optimizer, one case after another in one
job (torchrun, any world size); each rank saves, per case, whether its replicas were
bit-identical to every other rank's after each step (an all_gather of a hash, outside any
check of ddpdoctor's) and the case's final parameters.

Cases: SGD (momentum, nesterov), param groups with a scheduler, Adam for-loop / foreach,
AdamW fused, an optimizer subclass whose step calls super().step(), ZeroRedundancyOptimizer
(alone, and with Join on uneven inputs; torch refuses overlap_with_ddp on gloo), SGD under
Join on uneven inputs then even steps (the ranks' step counts differ after it), GradScaler
with autocast and a skipped step, a hand-written update (no optimizer: checked at DDP's
forward), broadcast_buffers=False with BatchNorm,
frozen parameters, find_unused_parameters, static_graph, no_sync accumulation.
Usage: torchrun --nproc-per-node N optimizer_matrix.py OUT
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5


class Net(nn.Module):
    def __init__(self, norm: bool = False, branch: bool = False) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.norm = nn.BatchNorm1d(16) if norm else nn.Identity()
        self.head = nn.Linear(16, 4)
        self.extra = nn.Linear(16, 4) if branch else None

    def forward(self, x: torch.Tensor, use_extra: bool = True) -> torch.Tensor:
        h = torch.relu(self.norm(self.body(x)))
        out = self.head(h)
        if self.extra is not None and use_extra:
            out = out + self.extra(h)
        return out


def net(**kw: bool) -> nn.Module:
    torch.manual_seed(0)
    return Net(**kw)


def batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(6, 8, generator=torch.Generator().manual_seed(1000 * rank + step))


def same_everywhere(model: nn.Module) -> bool:
    digest = hashlib.sha1()
    for p in model.parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, digest.hexdigest())
    return len(set(everyone)) == 1


class Halved(torch.optim.SGD):
    """A user's optimizer subclass: its step calls SGD's (the step hooks fire twice)."""

    def step(self, closure=None):  # type: ignore[override]
        return super().step(closure)


def loop(ddp: nn.Module, opt, rank: int, sched=None, steps: int = STEPS, **fwd) -> list[bool]:
    seen = []
    for step in range(steps):
        ddp(batch(rank, step), **fwd).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        seen.append(same_everywhere(ddp))
    return seen


def cases(rank: int, world: int):
    """(name, a function that trains one model and returns (its DDP, identical per step))."""
    def plain(make_opt, **ddp_kw):
        def run():
            ddp = DDP(net(), **ddp_kw)
            return ddp, loop(ddp, make_opt(ddp.parameters()), rank)
        return run

    def groups():
        ddp = DDP(net())
        m = ddp.module
        opt = torch.optim.SGD([{"params": m.body.parameters(), "lr": 0.05, "weight_decay": 1e-3},
                               {"params": m.head.parameters()}], lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return ddp, loop(ddp, opt, rank, sched)

    def zero_join():
        ddp = DDP(net())
        zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                       lr=0.01)
        seen = []
        with Join([ddp, zero]):
            for step in range(STEPS - 1 + rank):  # uneven inputs: each rank one more
                ddp(batch(rank, step)).square().mean().backward()
                zero.step()
                zero.zero_grad()
        seen.append(same_everywhere(ddp))
        return ddp, seen

    def join_then_even():
        ddp = DDP(net())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        with Join([ddp]):  # uneven: the ranks' step counts differ by 2 per rank after it
            for step in range(2 + 2 * rank):
                ddp(batch(rank, step)).square().mean().backward()
                opt.step()
                opt.zero_grad()
        return ddp, [same_everywhere(ddp)] + loop(ddp, opt, rank, steps=4)

    def scaler_skip():
        ddp = DDP(net())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
        seen = []
        for step in range(STEPS):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = ddp(batch(rank, step)).float().square().mean()
            if step == 2 and rank == 0:
                loss = loss * float("inf")  # one rank's overflow: every rank skips the step
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            seen.append(same_everywhere(ddp))
        return ddp, seen

    def by_hand():
        ddp = DDP(net())
        seen = []
        for step in range(STEPS + 1):
            ddp(batch(rank, step)).square().mean().backward()
            with torch.no_grad():
                for p in ddp.parameters():
                    p.add_(p.grad, alpha=-0.1)
                    p.grad = None
            seen.append(same_everywhere(ddp))
        return ddp, seen

    def buffers_kept():
        ddp = DDP(net(norm=True), broadcast_buffers=False)
        return ddp, loop(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), rank)

    def frozen():
        model = net()
        model.body.requires_grad_(False)
        ddp = DDP(model)
        return ddp, loop(ddp, torch.optim.Adam([p for p in ddp.parameters()
                                                if p.requires_grad], lr=0.01), rank)

    def unused():
        ddp = DDP(net(branch=True), find_unused_parameters=True)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        seen = []
        for step in range(STEPS):
            ddp(batch(rank, step), use_extra=step % 2 == 0).square().mean().backward()
            opt.step()
            opt.zero_grad()
            seen.append(same_everywhere(ddp))
        return ddp, seen

    def accumulate():
        ddp = DDP(net())
        opt = torch.optim.AdamW(ddp.parameters(), lr=0.01)
        seen = []
        for step in range(STEPS):
            with ddp.no_sync():
                ddp(batch(rank, 50 + step)).square().mean().backward()
            ddp(batch(rank, step)).square().mean().backward()
            opt.step()
            opt.zero_grad()
            seen.append(same_everywhere(ddp))
        return ddp, seen

    return [
        ("sgd_nesterov", plain(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                          nesterov=True))),
        ("param_groups_scheduler", groups),
        ("adam_forloop", plain(lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False))),
        ("adam_foreach", plain(lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True))),
        ("adamw_fused", plain(lambda ps: torch.optim.AdamW(ps, lr=0.01, fused=True))),
        ("optimizer_subclass", plain(lambda ps: Halved(ps, lr=0.1))),
        ("zero", plain(lambda ps: ZeroRedundancyOptimizer(
            ps, optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9))),
        ("zero_join", zero_join),
        ("join_then_even", join_then_even),
        ("grad_scaler_skip", scaler_skip),
        ("hand_written_update", by_hand),
        ("broadcast_buffers_false", buffers_kept),
        ("frozen", frozen),
        ("find_unused_parameters", unused),
        ("static_graph", plain(lambda ps: torch.optim.SGD(ps, lr=0.1), static_graph=True)),
        ("no_sync_accumulation", accumulate),
    ]


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    only = set(filter(None, os.environ.get("MATRIX_CASES", "").split(",")))
    identical: dict[str, list[bool]] = {}
    params: dict[str, dict[str, torch.Tensor]] = {}
    for name, run in cases(rank, world):
        if only and name not in only:
            continue
        ddp, seen = run()
        identical[name] = seen
        params[name] = {k: v.detach().clone() for k, v in ddp.module.state_dict().items()}
        del ddp
    torch.save({"identical": identical, "params": params, "order": list(identical)},
               os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
