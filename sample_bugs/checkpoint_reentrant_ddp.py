#!/usr/bin/env python
"""A shared layer under two reentrant activation checkpoints: every rank's first backward raises.

The encoder applies one shared layer twice (ALBERT-style weight sharing) and wraps each
application in torch.utils.checkpoint.checkpoint(..., use_reentrant=True) to save memory.
A reentrant checkpoint runs its block's forward under no_grad and re-runs it inside
backward, where a separate, nested backward pass gives the block's parameters their
gradients. DDP counts one gradient per parameter per iteration: the second checkpoint's
nested backward marks the shared layer's parameters ready a second time, and every rank
raises "Expected to mark a variable ready only once ... Parameter at index 3 with name
shared.fc.bias has been marked as ready twice" in its first backward.
Source: torch's own message (reason 2: "multiple `checkpoint` functions to wrap the same
part of your model"); microsoft/FocalNet#4; huggingface/accelerate#389; pytorch/pytorch#65537
(use_reentrant=False, the checkpoint that DDP supports).
Run: torchrun --nproc-per-node 2 checkpoint_reentrant_ddp.py
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
        # BUG: reentrant checkpointing of a block DDP sees twice in one iteration
        h = checkpoint(self.shared, h, use_reentrant=True)
        h = checkpoint(self.shared, h, use_reentrant=True)  # the same layer again
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
