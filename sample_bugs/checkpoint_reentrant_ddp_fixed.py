#!/usr/bin/env python
"""Fixed: non-reentrant activation checkpointing, which DDP supports.

checkpoint(..., use_reentrant=False) recomputes the block through saved-tensor hooks inside
the one backward pass, so each parameter of the shared layer gets one gradient (the sum of
both applications') and DDP marks it ready once per iteration. (static_graph=True in DDP
would work too, for a graph that is the same every iteration.)
Run: torchrun --nproc-per-node 2 checkpoint_reentrant_ddp_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class SharedLayer(nn.Module):
    """One layer whose weights every application shares."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, h):
        return h + torch.tanh(self.fc(h))


class Encoder(nn.Module):
    """Embed, the shared layer applied twice (each application checkpointed), classify."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.shared = SharedLayer()
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.embed(x)
        # FIX: non-reentrant checkpointing: one backward pass, one gradient per parameter
        h = checkpoint(self.shared, h, use_reentrant=False)
        h = checkpoint(self.shared, h, use_reentrant=False)  # the same layer again
        return self.head(h)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(Encoder())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for it in range(6):
        x = torch.randn(4, 8, generator=g)
        y = torch.randint(0, 2, (4,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
