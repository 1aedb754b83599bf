#!/usr/bin/env python
"""Early stopping decided per rank, then a closing barrier: the rank that stopped waits there.

Each rank judges its own validation shard. Rank 1's shard is mislabelled, so its validation
loss rises after the first epoch and it leaves the epoch loop (`break`) and enters the
barrier that ends training, while rank 0 starts the next epoch and waits in its first
gradient all-reduce: a barrier against DDP's bucket, one rank against one.
Source: isi-nlp/rtg#11 (early stop in distributed training hangs at the closing barrier),
Lightning-AI/pytorch-lightning#379.
Run: torchrun --nproc-per-node 2 early_stop_closing_barrier.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 8, generator=g)
    y = (x[:, 0] > 0).long()
    val_x, val_y = x[32:], y[32:]
    if rank == 1:
        val_y = 1 - val_y  # a mislabelled shard: its loss rises as the model learns
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    best = float("inf")
    for epoch in range(4):
        for i in range(0, 32, 8):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i:i + 8]), y[i:i + 8]).backward()
            opt.step()
        with torch.no_grad():
            val_loss = nn.functional.cross_entropy(model.module(val_x), val_y).item()
        # BUG: each rank decides alone whether to stop.
        if val_loss >= best:
            break
        best = val_loss
    dist.barrier()  # every rank leaves training together
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
