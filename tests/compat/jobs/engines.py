"""torch's engines beyond DDP, one after another in one 2-rank torchrun job on CPU (gloo):
FSDP1 (FullyShardedDataParallel), FSDP2 (fully_shard), DTensor tensor parallel
(parallelize_module), and a GPipe pipeline (torch.distributed.pipelining).  Each trains a few
steps; each rank saves every case's final parameters (full tensors).
Usage: torchrun --nproc-per-node 2 engines.py OUT
"""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

STEPS = 3


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * rank + step))


def train(m: nn.Module, rank: int) -> None:
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(STEPS):
        m(batch(rank, step)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def full(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
            for k, v in m.state_dict().items()}


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (world,))
    results: dict[str, dict[str, torch.Tensor]] = {}

    fsdp1 = FSDP(model(), device_id=torch.device("cpu"), use_orig_params=True)
    train(fsdp1, rank)
    with FSDP.summon_full_params(fsdp1):
        results["fsdp1"] = {k: v.detach().clone() for k, v in fsdp1.module.state_dict().items()}

    fsdp2 = model()
    for layer in fsdp2:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(fsdp2, mesh=mesh)
    train(fsdp2, rank)
    results["fsdp2"] = full(fsdp2)

    tp = parallelize_module(model(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(tp.parameters(), lr=0.1)
    for step in range(STEPS):  # tensor parallel: every rank takes the same batch
        tp(batch(0, step)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    results["tensor_parallel"] = full(tp)

    whole = model()  # GPipe: stage r holds layer r (rank 0: Linear+ReLU, rank 1: Linear)
    stage_module = nn.Sequential(whole[0], whole[1]) if rank == 0 else nn.Sequential(whole[2])
    stage = PipelineStage(stage_module, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=2,
                             loss_fn=lambda y, target: (y - target).square().mean())
    opt = torch.optim.SGD(stage_module.parameters(), lr=0.1)
    for step in range(STEPS):
        if rank == 0:
            schedule.step(batch(0, step))
        else:
            schedule.step(target=torch.zeros(4, 4))
        opt.step()
        opt.zero_grad()
    results["pipeline"] = {k: v.detach().clone() for k, v in stage_module.state_dict().items()}

    torch.save({"params": results}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
