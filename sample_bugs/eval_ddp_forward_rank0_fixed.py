#!/usr/bin/env python
"""Fixed twin of eval_ddp_forward_rank0.py: rank 0 evaluates on `model.module`, the wrapped
module, whose forward is no collective.
Run: torchrun --nproc-per-node 2 eval_ddp_forward_rank0_fixed.py
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
                # FIX: the wrapped module's forward is no collective
                acc = (model.module(val_x).argmax(1) == val_y).float().mean().item()
            print(f"epoch {epoch}: val accuracy {acc:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
