#!/usr/bin/env python
"""Fixed twin of no_sync_token_count.py: the ranks leave no_sync() together.

The token count is all-reduced (MIN) each micro-batch, so every rank syncs in the same
micro-batch: the gradient all-reduces and the loss log stay in step.
Run: torchrun --nproc-per-node 2 no_sync_token_count_fixed.py
"""
import contextlib
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
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    tokens = 0
    for micro in range(12):
        n = 40 if rank == 1 and micro == 5 else 10  # this rank's sequence lengths
        tokens += n
        seen = torch.tensor([tokens])
        dist.all_reduce(seen, op=dist.ReduceOp.MIN)
        sync = int(seen) >= 40
        ctx = contextlib.nullcontext() if sync else model.no_sync()
        with ctx:
            model(torch.randn(n, 8, generator=g)).pow(2).mean().backward()
        if sync:
            opt.step()
            opt.zero_grad()
            tokens = 0
        if micro % 6 == 5:
            loss = torch.tensor([float(micro)])
            dist.all_reduce(loss)  # the loss for the log
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
