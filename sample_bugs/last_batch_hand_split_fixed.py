#!/usr/bin/env python
"""Fixed twin of last_batch_hand_split.py: every rank runs the same number of batches.

DistributedSampler gives each rank the same number of samples, and drop_last=True drops the
short last batch, so the ranks reach every gradient all-reduce and the barrier together.
Run: torchrun --nproc-per-node 2 last_batch_hand_split_fixed.py
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
    data = TensorDataset(torch.randn(9, 8, generator=g), torch.randint(0, 2, (9,), generator=g))

    # FIX: DistributedSampler pads the shards to the same size; drop_last evens the batches.
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=2, sampler=sampler, drop_last=True)

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
