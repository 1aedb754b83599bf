#!/usr/bin/env python
"""dtype mismatch: an accuracy counter is float32 on some ranks and int64 on another.

The metric tensor is built with torch.tensor([correct, seen]), whose dtype follows the Python
values: a rank that scored batches holds a float `correct` (float32 tensor); rank 2, whose
evaluation shard is empty, still holds the int 0 (int64 tensor). The all_reduce's dtypes differ:
NCCL sums garbage or hangs, gloo aborts.
Source: modelscope/ms-swift#9550 (float32 vs float64 metric tensors hang all_reduce),
pytorch/pytorch#150248.
Run: torchrun --nproc-per-node 3 dtype_mismatch.py
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
    # BUG: the dtype is inferred from the values: float32 on ranks 0-1, int64 on rank 2.
    stats = torch.tensor([correct, seen])
    dist.all_reduce(stats)
    if rank == 0:
        print(f"validation accuracy {stats[0] / stats[1]:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
