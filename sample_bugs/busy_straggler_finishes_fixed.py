#!/usr/bin/env python
"""Fixed twin of busy_straggler_finishes: evaluation shards of equal cost, no straggler.

The evaluation set is sharded evenly: each rank evaluates for about 1 s.
Run: torchrun --nproc-per-node 2 busy_straggler_finishes_fixed.py
"""
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

EVAL_SECONDS = {0: 1.0, 1: 1.0}  # FIX: even evaluation shards


def evaluate(seconds: float) -> float:
    """Score the model on this rank's shard: CPU-bound work for ``seconds``."""
    x = torch.randn(128, 128)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = torch.tanh(x @ x / 128)
    return float(x.abs().mean())


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    score = evaluate(EVAL_SECONDS.get(rank, EVAL_SECONDS[0]))
    metric = torch.tensor([score])
    dist.all_reduce(metric)
    print(f"rank {rank}: mean score {float(metric) / dist.get_world_size():.3f}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
