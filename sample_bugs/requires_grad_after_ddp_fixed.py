#!/usr/bin/env python
"""Fixed: after unfreezing the embedding, the script builds a new DDP around the model, whose
reducer averages the embedding's gradients too.

The bug: a frozen layer unfrozen after DDP was built.

The script fine-tunes the head first and unfreezes the embedding after a warm-up of two steps
(`requires_grad_(True)`), keeping the DDP it built while the embedding was frozen. DDP's
reducer holds the parameters that required a gradient when it was built: the embedding is in
none of its buckets, so each rank steps it with its own, unaveraged gradient, and the replicas
drift apart from the first step after the warm-up. No error, no hang.
Source: torch's DDP docs (the parameters that require gradients are fixed when DDP is built;
changing requires_grad later is not supported); gradual unfreezing in fine-tuning.
Run: torchrun --nproc-per-node 2 requires_grad_after_ddp.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WARMUP_STEPS = 2


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    net[0].requires_grad_(False)  # warm-up: the head alone
    model = DDP(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(6):
        if step == WARMUP_STEPS:
            net[0].requires_grad_(True)
            model = DDP(net)  # FIX: a DDP that knows the embedding requires gradients
        opt.zero_grad()
        model(torch.randn(4, 8, generator=g)).square().mean().backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
