#!/usr/bin/env python
"""Fixed twin of checkpoint_on_own_clock.py: rank 0 reads the clock for every rank.

Rank 0 decides whether the interval has passed and broadcasts the decision, so every rank
saves and enters the barrier in the same step.
Run: torchrun --nproc-per-node 4 checkpoint_on_own_clock_fixed.py
"""
import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tempfile.mkdtemp()
    last_save = time.monotonic()
    for step in range(8):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        if rank == 1 and step == 3:
            time.sleep(2.5)  # a slow log write on this rank
        due = torch.tensor([int(time.monotonic() - last_save > 2.0)])
        dist.broadcast(due, src=0)  # rank 0's clock decides for every rank
        if int(due):
            torch.save(model.module.state_dict(), os.path.join(out, f"ckpt{rank}.pt"))
            dist.barrier()
            last_save = time.monotonic()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
