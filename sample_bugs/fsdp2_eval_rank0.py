#!/usr/bin/env python
"""FSDP2: rank 0 evaluates the sharded model alone; its forward all-gathers the parameters.

The model is sharded with `fully_shard` (FSDP2): each rank holds a slice of every layer's
parameters, and every forward all-gathers them first. After step 1, rank 0 runs a quick
evaluation under `if rank == 0:`. That forward's all-gathers are collectives only rank 0
makes: rank 1 goes on to the next training step, whose own all-gathers meet rank 0's
evaluation gathers of other sizes. gloo aborts (NCCL hangs). No line of the user's calls a
collective: the evaluation's `model(...)` line is where the ranks part.
Source: pytorch/pytorch#76949 (FSDP all-gathers during an evaluation on some ranks) and
#77562 (FSDP collectives time out when ranks take different paths at the end of an epoch).
Run: torchrun --nproc-per-node 2 fsdp2_eval_rank0.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(4):
        loss = model(torch.randn(4, 8, generator=g)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if rank == 0 and step == 1:
            with torch.no_grad():
                # BUG: the sharded model's forward all-gathers: a collective on rank 0 only
                score = model(torch.randn(2, 8, generator=g)).sum().item()
            print(f"eval score {score:.3f}", flush=True)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
