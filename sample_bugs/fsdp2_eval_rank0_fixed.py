#!/usr/bin/env python
"""The fixed twin of fsdp2_eval_rank0.py: every rank runs the evaluation's forward.

A sharded model's forward all-gathers its parameters, so every rank evaluates (each on its
own batch); only the print stays on rank 0.
Run: torchrun --nproc-per-node 2 fsdp2_eval_rank0_fixed.py
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
        if step == 1:
            with torch.no_grad():
                # FIX: the sharded forward is a collective: every rank evaluates
                score = model(torch.randn(2, 8, generator=g)).sum().item()
            if rank == 0:
                print(f"eval score {score:.3f}", flush=True)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
