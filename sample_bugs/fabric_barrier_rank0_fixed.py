#!/usr/bin/env python
"""The fixed twin of fabric_barrier_rank0.py: rank 0 saves, every rank waits in the barrier.
Run: torchrun --nproc-per-node 2 fabric_barrier_rank0_fixed.py
"""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from torch import nn


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))  # Fabric uses it
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = fabric.setup(model, opt)
    g = torch.Generator().manual_seed(rank)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    for step in range(5):
        fabric.backward(model(torch.randn(4, 8, generator=g)).square().mean())
        opt.step()
        opt.zero_grad()
        if step == 2:
            if fabric.global_rank == 0:
                torch.save(model.state_dict(), path)
            fabric.barrier()  # FIX: every rank reaches the barrier
    fabric.print("done")


if __name__ == "__main__":
    main()
