#!/usr/bin/env python
"""A rank crashes mid-epoch on a corrupt record; the others wait for it in the next all-reduce.

Record 9 of the dataset cannot be decoded. It falls in rank 1's third batch, so rank 1 raises
ValueError while rank 0 waits in the gradient all-reduce of that step: on NCCL rank 0 hangs
until the collective times out, on gloo it fails with "Connection closed by peer", and the
first error is easily lost among the others'.
Source: Lightning-AI/pytorch-lightning#6430 (one rank raises, the others hang),
rwth-i6/returnn#1484.
Run: torchrun --nproc-per-node 2 crash_mid_epoch.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

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
    data = Records()
    # BUG: the data is not checked; a corrupt record kills the rank that draws it.
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: {step + 1} steps done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
