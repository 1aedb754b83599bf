#!/usr/bin/env python
"""A rank runs out of hand-split batches and returns cleanly while the other starts one more step.

No DataLoader: each rank slices its own batches out of one tensor. 11 samples in batches of 2
split by hand (`rank::world`) give rank 0 six samples (3 batches) and rank 1 five (2 full
batches, the odd sample dropped). Rank 1 finishes its loop, destroys the process group and
returns with exit 0; rank 0 enters its third DDP step and waits in the gradient all-reduce for
a rank that is gone (gloo: "Connection closed by peer" on rank 0; NCCL: hang). The error shows
on rank 0; the cause is rank 1's shorter share of the data.
Source: the seed article's last-batch hang (hand-split data); pytorch/pytorch#38174.
Run: torchrun --nproc-per-node 2 clean_exit_uneven_no_loader.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH = 2


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(11, 8, generator=g), torch.randint(0, 2, (11,), generator=g)
    # BUG: a hand-made split; the ranks' shares differ by one batch.
    mine_x, mine_y = x[rank::world], y[rank::world]
    steps = len(mine_x) // BATCH
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        xb, yb = mine_x[i * BATCH:(i + 1) * BATCH], mine_y[i * BATCH:(i + 1) * BATCH]
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    print(f"rank {rank}: {steps} steps done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
