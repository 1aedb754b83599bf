#!/usr/bin/env python
"""Fixed twin of time_budget_exit.py: rank 0's clock decides when the budget is spent.

Rank 0 reads its clock and broadcasts the decision, so every rank leaves the loop in the
same step.
Run: torchrun --nproc-per-node 2 time_budget_exit_fixed.py
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
        spent = torch.tensor([int(time.monotonic() - start > 2.0)])
        dist.broadcast(spent, src=0)  # rank 0's clock decides for every rank
        if int(spent):
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
