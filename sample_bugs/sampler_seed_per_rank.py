#!/usr/bin/env python
"""Silent data: each rank seeds its DistributedSampler differently (seed = base + rank).

A DistributedSampler hands each rank every world_size-th index of one permutation drawn from
seed + epoch; only a seed shared by every rank makes the slices a partition. Seeded per rank
(the usual "seed everything with base + rank" applied to the sampler too), each rank slices
its own permutation: every epoch about a quarter of the data is never drawn and a quarter is
drawn twice. Nothing hangs or fails.
Source: NVlabs/LongLive#71, mlcommons/training#625 (20-30% overlap measured), open-mmlab's
sync_random_seed (mmdetection#7432, mmengine#142).
Run: torchrun --nproc-per-node 2 sampler_seed_per_rank.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

BASE_SEED = 1234


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(BASE_SEED + rank)  # per-rank randomness: right for augmentation
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    # BUG: the sampler gets the per-rank seed too; every rank must shuffle with the same one.
    sampler = DistributedSampler(data, shuffle=True, seed=BASE_SEED + rank)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print(f"rank {rank}: drew {sorted(sampler)[:6]}...", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
