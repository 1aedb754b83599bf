#!/usr/bin/env python
"""Seed collision: every rank seeds torch with the same number and augments at random.

The ranks draw the same "random" crops and noise: augmentation is identical across ranks,
so N ranks see far less variety than N times one rank. Nothing hangs or crashes.
Source: the article "torch.distributed多卡/多GPU/分布式DPP(二)" (fixed seed 0 on every rank
makes YOLOv5's mosaic augmentation identical; fix: init_seeds(1 + rank)).
Run: torchrun --nproc-per-node 2 same_seed_augmentation.py
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
    # BUG: the same seed on every rank, so every rank draws the same augmentations.
    torch.manual_seed(SEED)

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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
