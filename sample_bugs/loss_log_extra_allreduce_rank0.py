#!/usr/bin/env python
"""Rank 0 alone all-reduces its validation loss: one collective too many, found late.

Every step all-reduces the loss for the log (a 0-d float32 tensor). After each epoch, rank 0
alone averages its validation loss with `dist.all_reduce` inside `if rank == 0:`: the same op
and shape as the next step's loss all-reduce, so rank 0's extra call meets rank 1's next
logging call and nothing fails there. Rank 0 is one call ahead from then on; the next step's
loss all-reduce on rank 0 meets rank 1's gradient all-reduce, and the job hangs there, at an
innocent line.
Source: Lightning-AI/pytorch-lightning#19783 (a metric synced under `is_global_zero` hangs
DDP), pytorch/pytorch#38174's family of rank-dependent collectives.
Run: torchrun --nproc-per-node 2 loss_log_extra_allreduce_rank0.py
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
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
    val_x, val_y = torch.randn(8, 8, generator=g), torch.randint(0, 2, (8,), generator=g)
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            logged = loss.detach().clone()
            dist.all_reduce(logged)  # the mean loss for the log, every step
            loss.backward()
            opt.step()
        if rank == 0:
            with torch.no_grad():
                val = nn.functional.cross_entropy(model.module(val_x), val_y)
            # BUG: a collective on rank 0 alone; it matches the others' next loss all-reduce
            dist.all_reduce(val)
            print(f"epoch {epoch}: val loss {val.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
