#!/usr/bin/env python
"""Fixed twin of same_seed_augmentation.py: each rank gets its own fixed seed (SEED + rank).

Runs stay reproducible, the ranks draw different augmentations, and DDP still starts every
rank from rank 0's weights (it broadcasts them when it wraps the model).
Run: torchrun --nproc-per-node 2 same_seed_augmentation_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SEED = 0


class NoisyCrops(Dataset):
    """16 "images" of 12 values; each sample is a random 8-value crop plus noise."""

    def __init__(self):
        g = torch.Generator().manual_seed(1234)
        self.images = torch.randn(16, 12, generator=g)
        self.labels = torch.randint(0, 2, (16,), generator=g)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        start = int(torch.randint(0, 5, ()))  # random crop: the global torch RNG
        x = self.images[i, start:start + 8] + 0.1 * torch.randn(8)  # random noise
        return x, self.labels[i]


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    # FIX: a different, fixed seed on each rank.
    torch.manual_seed(SEED + rank)

    data = NoisyCrops()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print(f"rank {rank}: next random number {torch.rand(()).item():.6f}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
