#!/usr/bin/env python
"""Fixed twin of oom_killed_mid_epoch: the debug dump keeps detached values, not graphs.

Rank 1 keeps every batch's activations for a debug dump (a leak that grows with the step);
on a real host the OOM killer ends it with SIGKILL, without a Python traceback, atexit or
flushed logs. Here the kill comes when the cache passes its budget, at step 3. Rank 0 then
waits in that step's DDP bucket all-reduce (gloo: "Connection closed by peer"; NCCL: hang).
Under `ddpdoctor run --ddp torch` the buckets the killed rank launched are in its trace.
Source: Lightning-AI/pytorch-lightning#6430 (one rank gone, the others hang),
pytorch/pytorch#13246 (DataLoader memory growth until the OOM killer).
Run: torchrun --nproc-per-node 2 oom_killed_mid_epoch_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUDGET = 3  # cached batches a rank can hold before "the host runs out of memory"


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cache = []
    for step in range(6):
        x = torch.randn(4, 8)
        if rank == 1:
            with torch.no_grad():
                cache.append(model.module(x))  # FIX: values only, no graph kept
            cache = cache[-BUDGET:]
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
