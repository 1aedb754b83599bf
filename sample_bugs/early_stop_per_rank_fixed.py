#!/usr/bin/env python
"""Fixed twin of early_stop_per_rank.py: the ranks decide together whether to stop.

The validation loss is averaged over all ranks (all_reduce) before the patience check, so
every rank sees the same number and they stop, or go on, together.
Run: torchrun --nproc-per-node 3 early_stop_per_rank_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 8, generator=g)
    y = (x[:, 0] > 0).long()  # an easy rule: the validation loss falls epoch after epoch
    train = TensorDataset(x[:36], y[:36])
    val_x, val_y = x[36:][rank::world], y[36:][rank::world]  # this rank's validation shard
    if rank == 1:
        val_y = 1 - val_y  # a mislabelled shard: its loss rises as the model learns
    sampler = DistributedSampler(train, shuffle=True)
    loader = DataLoader(train, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    best = float("inf")
    for epoch in range(4):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            local = nn.functional.cross_entropy(model(val_x), val_y).reshape(1)
        # FIX: one decision for the job: average the loss over the ranks first.
        dist.all_reduce(local)
        val_loss = local.item() / world
        print(f"rank {rank} epoch {epoch}: val loss {val_loss:.3f}", flush=True)
        if val_loss >= best:
            print(f"rank {rank}: no improvement, stopping early", flush=True)
            break
        best = val_loss
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
