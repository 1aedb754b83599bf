#!/usr/bin/env python
"""Fixed twin of crash_mid_epoch.py: corrupt records are dropped before the data is sharded.

Every rank checks the same records and drops the same ones, so the shards stay even and no
rank meets a record it cannot decode.
Run: torchrun --nproc-per-node 2 crash_mid_epoch_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

CORRUPT = {9}


class Records(Dataset):
    """16 encoded records; the ones in CORRUPT were truncated on disk."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(16, 8, generator=g)
        self.y = torch.randint(0, 2, (16,), generator=g)

    def __len__(self):
        return len(self.x)

    def is_valid(self, i: int) -> bool:
        return i not in CORRUPT

    def __getitem__(self, i):
        if not self.is_valid(i):
            raise ValueError(f"record {i}: cannot decode, the file is truncated")
        return self.x[i], self.y[i]


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    records = Records()
    # FIX: validate first (the same on every rank), then shard only the good records.
    data = Subset(records, [i for i in range(len(records)) if records.is_valid(i)])
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: {step + 1} steps done", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
