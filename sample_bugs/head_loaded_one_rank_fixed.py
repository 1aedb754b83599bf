#!/usr/bin/env python
"""Fixed: the cached head is loaded before DDP is built, whose construction copies rank 0's
parameters to every rank (to keep rank 1's copy, load it on every rank).

The bug: a layer loaded from a checkpoint on one rank after DDP was built.

Each rank looks for a fine-tuned head in its node's local cache once the model is wrapped.
Rank 1's node holds one (left from an earlier run), so rank 1 alone loads it into
`model.module.head`. DDP copies rank 0's parameters to every rank only when it is built; from
then on each rank applies the same averaged gradient to its own copy, so rank 1 trains a
different head for the rest of the run. No error, no hang.
Source: torch's DDP docs (DDP broadcasts rank 0's parameters once, at construction: load a
checkpoint on every rank, or before wrapping the model).
Run: torchrun --nproc-per-node 2 head_loaded_one_rank.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Body(nn.Linear):
    def __init__(self):
        super().__init__(8, 16)


class Head(nn.Linear):
    def __init__(self):
        super().__init__(16, 2)


def cached_head(rank: int):
    """The head weights this rank's node has cached (rank 1's node: a stale copy)."""
    if rank != 1:
        return None
    torch.manual_seed(123)
    return nn.Linear(16, 2).state_dict()


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    net = nn.Sequential(Body(), Head())
    state = cached_head(rank)
    if state is not None:
        net[1].load_state_dict(state)  # FIX: before DDP, which copies rank 0's to every rank
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(6):
        opt.zero_grad()
        model(torch.randn(4, 8, generator=g)).square().mean().backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
