#!/usr/bin/env python
"""Fixed: the running loss is averaged over the ranks before it sets the clipping threshold.

The bug: gradient clipping with a per-rank threshold.

Adaptive clipping: the threshold follows a running mean of the loss, and each rank keeps its
own from its own batches. DDP gives every rank the same averaged gradient in backward; then
clip_grad_norm_ scales it by a different factor on each rank, so each rank takes a different
step. No error, no hang.
Source: adaptive clipping from per-rank statistics (a threshold from the rank's own loss or
data instead of a value every rank shares).
Run: torchrun --nproc-per-node 2 grad_clip_local_loss.py
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
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    running = None
    for _ in range(6):
        opt.zero_grad()
        loss = model(torch.randn(4, 8, generator=g)).square().mean()
        loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # FIX: every rank's threshold from the same (mean) loss
        mean = mean.item() / dist.get_world_size()
        running = mean if running is None else 0.9 * running + 0.1 * mean
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1 * running)
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
