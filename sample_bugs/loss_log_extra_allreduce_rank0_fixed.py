#!/usr/bin/env python
"""Fixed twin of loss_log_extra_allreduce_rank0.py: every rank all-reduces its validation
loss; only the print stays under `if rank == 0:`.
Run: torchrun --nproc-per-node 2 loss_log_extra_allreduce_rank0_fixed.py
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
        with torch.no_grad():
            val = nn.functional.cross_entropy(model.module(val_x), val_y)
        dist.all_reduce(val)  # FIX: on every rank
        if rank == 0:
            print(f"epoch {epoch}: val loss {val.item() / dist.get_world_size():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
