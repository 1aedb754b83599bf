#!/usr/bin/env python
"""A model frozen differently on one rank: DDP's construction check fails on every rank.

Each rank builds the model from its own copy of the run's config. Rank 1's copy says to
fine-tune only the head (an old file left on its node), so rank 1 freezes the encoder's weight
before wrapping the model in DDP. DDP's constructor compares the ranks' parameters (those that
require grad) and every rank raises "DDP expects same model across all ranks, but Rank 1 has 3
params, while rank 0 has inconsistent 4 params": the innocent ranks raise it too.
Source: yifan123/flow_grpo#245 (a per-rank branch builds the adapters differently: "Rank 0 has
382 params, while rank 1 has inconsistent 0 params"); NVIDIA/apex#46 (freezing under DDP).
Run: torchrun --nproc-per-node 3 frozen_on_one_rank.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def rank_config(rank: int) -> dict:
    """The config as each rank reads it from its node (rank 1's node holds an old copy)."""
    return {"freeze_encoder": rank == 1}


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("encoder", nn.Linear(8, 16))
    model.add_module("head", nn.Linear(16, 2))
    if rank_config(rank)["freeze_encoder"]:
        model.encoder.weight.requires_grad_(False)  # BUG: frozen on this rank only
    ddp = DDP(model)
    opt = torch.optim.SGD([p for p in ddp.parameters() if p.requires_grad], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.randn(4, 8)).sum().backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
