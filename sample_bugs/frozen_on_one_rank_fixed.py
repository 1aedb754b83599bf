#!/usr/bin/env python
"""Fixed: every rank builds the same model (the config is read once, on rank 0, and broadcast).

Run: torchrun --nproc-per-node 3 frozen_on_one_rank_fixed.py
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
    # FIX: one config for every rank: rank 0's, broadcast before the model is built
    config = [rank_config(rank)]
    dist.broadcast_object_list(config, src=0)
    if config[0]["freeze_encoder"]:
        model.encoder.weight.requires_grad_(False)
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
