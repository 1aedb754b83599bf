#!/usr/bin/env python
"""Fixed twin of no_set_epoch.py: set_epoch() before each epoch reshuffles the data.

The sampler seeds its shuffle with seed + epoch, so each epoch gets a new order, the same
on every rank (the shards stay disjoint).

Run: torchrun --nproc-per-node 2 no_set_epoch_fixed.py
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
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        # FIX: a new permutation each epoch, the same on every rank.
        sampler.set_epoch(epoch)
        order = []
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            order.append(round(float(x[0, 0]), 2))
        print(f"rank {rank} epoch {epoch}: first samples {order[:3]}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
