#!/usr/bin/env python
"""Fixed twin of dtype_mismatch.py: the metric tensor's dtype is stated, not inferred.

torch.tensor([correct, seen], dtype=torch.float64) has the same dtype on every rank, whatever
Python types the counters hold, and float64 counts exactly.
Run: torchrun --nproc-per-node 3 dtype_mismatch_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(28, 8, generator=g), torch.randint(0, 2, (28,), generator=g))
    train, val = Subset(data, range(24)), Subset(data, range(24, 28))

    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(train, batch_size=4, sampler=DistributedSampler(train, shuffle=False)):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    per_rank = -(-len(val) // world)  # 2 validation samples a rank: rank 2 gets none
    shard = Subset(val, range(rank * per_rank, min(len(val), (rank + 1) * per_rank)))
    correct, seen = 0, 0
    with torch.no_grad():
        for x, y in DataLoader(shard, batch_size=2):
            correct += (model(x).argmax(1) == y).float().sum().item()
            seen += len(y)
    # FIX: one dtype on every rank.
    stats = torch.tensor([correct, seen], dtype=torch.float64)
    dist.all_reduce(stats)
    if rank == 0:
        print(f"validation accuracy {stats[0] / stats[1]:.3f}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
