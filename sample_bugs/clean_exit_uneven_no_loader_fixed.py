#!/usr/bin/env python
"""Fixed twin of clean_exit_uneven_no_loader: every rank trains the same number of steps.

The ranks agree on the number of full batches first (all-reduce MIN) and train exactly
that many; the remainder is dropped, as DistributedSampler(drop_last=True) would.
Run: torchrun --nproc-per-node 2 clean_exit_uneven_no_loader_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH = 2


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(11, 8, generator=g), torch.randint(0, 2, (11,), generator=g)
    mine_x, mine_y = x[rank::world], y[rank::world]
    # FIX: every rank trains as many steps as the shortest share allows.
    steps = torch.tensor([len(mine_x) // BATCH])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps = int(steps)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        xb, yb = mine_x[i * BATCH:(i + 1) * BATCH], mine_y[i * BATCH:(i + 1) * BATCH]
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    print(f"rank {rank}: {steps} steps done", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
