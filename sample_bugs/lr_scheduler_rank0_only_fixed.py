#!/usr/bin/env python
"""Fixed: every rank steps its LR scheduler; only the log line stays under `if rank == 0:`.

The model also holds a BatchNorm with DDP(..., broadcast_buffers=False): each rank keeps its
own running statistics, which ddpdoctor reports as information only.

The bug: the LR scheduler stepped on rank 0 only.

The epoch-end block logs the learning rate and steps the scheduler, all under `if rank == 0:`
(written for the log line). From the first epoch's end rank 0 steps with lr 0.05, rank 1
with lr 0.1: every rank applies the same averaged gradient with a different step size, and the
replicas drift apart. No error, no hang.
Source: a scheduler step placed inside the rank-0 logging block (the shape ddpdoctor lint
flags: optimizer settings changed under a rank test).
Run: torchrun --nproc-per-node 2 lr_scheduler_rank0_only.py
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
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(),
                              nn.Linear(16, 2)), broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    g = torch.Generator().manual_seed(rank)
    for epoch in range(3):
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8, generator=g)).square().mean().backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: lr {sched.get_last_lr()[0]:.3f}", flush=True)
        sched.step()  # FIX: every rank steps its scheduler
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
