#!/usr/bin/env python
"""Lightning Fabric: `fabric.barrier()` under a rank test.

Rank 0 saves a checkpoint after step 2 and waits for the others in `fabric.barrier()`, all
under `if fabric.global_rank == 0:`; rank 1 goes on to the next step, whose backward
all-reduces the gradients. Rank 0's barrier meets rank 1's gradient all-reduce: the job
hangs (gloo: or aborts on the mismatch).
Source: Lightning Fabric's API docs (`barrier`: wait for all processes to enter this call);
the Trainer's form of the same bug is lightning_all_gather_global_zero.py.
Run: torchrun --nproc-per-node 2 fabric_barrier_rank0.py
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
        if step == 2 and fabric.global_rank == 0:
            torch.save(model.state_dict(), path)
            fabric.barrier()  # BUG: only rank 0 reaches this barrier
    fabric.print("done")


if __name__ == "__main__":
    main()
