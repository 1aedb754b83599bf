#!/usr/bin/env python
"""A shared layer under two reentrant checkpoints, straight on the batch: no error, the replicas drift.

The encoder applies one shared layer twice (ALBERT-style weight sharing), each application
under torch.utils.checkpoint.checkpoint(..., use_reentrant=True), and no parameter comes before
the first checkpoint (the batch goes straight in). torch 2.13's DDP raises nothing here: it
averages the shared layer's gradient from the first nested backward, then the second nested
backward adds this rank's own gradient to it after its bucket was reduced. Each rank steps
with a different gradient for `shared.fc.weight` and `shared.fc.bias`: the replicas drift apart
from the first step, and nothing complains.
Source: torch's DDP notes (reentrant checkpointing is unsupported); microsoft/FocalNet#4;
huggingface/accelerate#389; pytorch/pytorch#65537.
Run: torchrun --nproc-per-node 2 checkpoint_reentrant_drift.py
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
        self.fc = nn.Linear(8, 8)

    def forward(self, h):
        return h + torch.tanh(self.fc(h))


class Encoder(nn.Module):
    """The shared layer applied twice to the batch (each application checkpointed), classify."""

    def __init__(self):
        super().__init__()
        self.shared = SharedLayer()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        # FIX: non-reentrant checkpointing: one gradient per parameter, averaged once
        h = checkpoint(self.shared, x, use_reentrant=False)
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
        x = torch.randn(4, 8, generator=g, requires_grad=True)
        y = torch.randint(0, 2, (4,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
