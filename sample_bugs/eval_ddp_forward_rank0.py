#!/usr/bin/env python
"""Rank 0 evaluates with the DDP model itself: its forward is a collective the user never wrote.

The model has BatchNorm buffers and DDP's default broadcast_buffers=True, so every forward of
the DDP model broadcasts the buffers from rank 0 before computing. After each epoch rank 0
alone computes the validation accuracy with `model(val_x)`: that forward's broadcast meets
rank 1's next training forward (same op, same buffers), and rank 0 is one collective ahead:
its next training broadcast meets rank 1's gradient all-reduce, and the job hangs there.
Source: pytorch/pytorch#37764 and #23658 (evaluating a DDP model on rank 0 only hangs),
Lightning-AI/pytorch-lightning#4178 (validation on rank 0 with a DDP model).
Run: torchrun --nproc-per-node 2 eval_ddp_forward_rank0.py
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
    val_x, val_y = torch.randn(16, 8, generator=g), torch.randint(0, 2, (16,), generator=g)
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if rank == 0:
            model.eval()
            with torch.no_grad():
                # BUG: the DDP model's forward broadcasts the buffers: a collective on rank 0 alone
                acc = (model(val_x).argmax(1) == val_y).float().mean().item()
            print(f"epoch {epoch}: val accuracy {acc:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
