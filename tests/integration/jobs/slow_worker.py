"""Rank 0's DataLoader worker spends SLOW_S seconds on one sample (WORK=sleep: a slow fetch
that only waits; WORK=cpu: a slow decode) while rank 0's main process sleeps on the worker
queue and rank 1 waits in the next all_reduce: a straggler, not a hang."""

import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SLOW_S = float(os.environ.get("SLOW_S", "9"))
WORK = os.environ.get("WORK", "sleep")


class Samples(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 4 and RANK == 0:
            end = time.monotonic() + SLOW_S
            while time.monotonic() < end:
                if WORK == "sleep":
                    time.sleep(end - time.monotonic())
                else:
                    sum(range(10_000))
        return torch.full((4,), float(i))


dist.init_process_group("gloo")
RANK = dist.get_rank()
model = torch.nn.Linear(4, 1)
loader = DataLoader(Samples(), batch_size=2, num_workers=1,
                    sampler=DistributedSampler(Samples(), shuffle=False))
for x in loader:
    model.zero_grad()
    model(x).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
print(f"rank {RANK} done", flush=True)
dist.destroy_process_group()
