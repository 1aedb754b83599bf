#!/usr/bin/env python
"""Stale shuffle: DistributedSampler(shuffle=True) without set_epoch() repeats the same order.

The sampler seeds its shuffle with seed + epoch, and the epoch only changes through
set_epoch(). Without it every epoch sees the same permutation, so "shuffling" does nothing
after the first epoch. Nothing hangs or crashes: the model just trains on a fixed order.
Source: pytorch/pytorch#31771 and #11324, the DistributedSampler warning in torch.utils.data.
Run: torchrun --nproc-per-node 2 no_set_epoch.py
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
        # BUG: sampler.set_epoch(epoch) is missing; every epoch repeats epoch 0's order.
        order = []
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            order.append(round(float(x[0, 0]), 2))
        print(f"rank {rank} epoch {epoch}: first samples {order[:3]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
