#!/usr/bin/env python
"""A time budget checked per rank: the rank whose own clock runs out first leaves and exits.

Each rank trains until its own clock says the 2 s budget is spent. Rank 1 spends 2.5 s
writing a log after step 3, so its budget runs out first: it leaves the loop (`break`) and
exits, while rank 0, whose clock says 0.5 s, starts step 4 and waits in its gradient
all-reduce for a rank that is gone (gloo: "Connection closed by peer").
Source: Lightning-AI/pytorch-lightning's max_time and the HF Trainer's time budgets read per
rank (Lightning-AI/pytorch-lightning#379's family: a stop decided per rank).
Run: torchrun --nproc-per-node 2 time_budget_exit.py
"""
import datetime
import os
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
    start = time.monotonic()
    for step in range(40):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        if rank == 1 and step == 3:
            time.sleep(2.5)  # a slow log write on this rank
        # BUG: each rank reads its own clock to decide when the budget is spent.
        if time.monotonic() - start > 2.0:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
