#!/usr/bin/env python
"""Last-batch hang: a dataset split by hand gives the ranks different numbers of batches.

Each rank keeps every WORLD_SIZE-th of 9 samples: rank 0 gets 5 (3 batches of 2), rank 1
gets 4 (2 batches). Rank 1 leaves the loop and waits in the barrier before the checkpoint,
while rank 0 waits in the gradient all-reduce of its third batch: the job hangs.
Source: the article "DDP分布式的随机卡死,带你从0调试解决" (last batch hangs; fix: Sampler & drop_last).
Run: torchrun --nproc-per-node 2 last_batch_hand_split.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(9, 8, generator=g), torch.randint(0, 2, (9,), generator=g))

    # BUG: a hand-made split; 9 samples do not divide evenly between the ranks.
    shard = Subset(data, list(range(rank, len(data), world)))
    loader = DataLoader(shard, batch_size=2)

    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: {len(loader)} batches done", flush=True)

    dist.barrier()  # every rank finished the epoch: save a checkpoint
    if rank == 0:
        print("epoch done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
