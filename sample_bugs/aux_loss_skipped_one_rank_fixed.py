#!/usr/bin/env python
"""Fixed: the auxiliary head takes part in every iteration of every rank.

Its loss is weighted by zero when the batch holds no sample of the rare class, so DDP gets a
gradient of every parameter every iteration (find_unused_parameters=True would work too, at
the cost of a graph search each iteration).
Run: torchrun --nproc-per-node 2 aux_loss_skipped_one_rank_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class WithAux(nn.Module):
    """A classifier with an auxiliary head for the rare class."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)
        self.aux = nn.Linear(16, 1)

    def forward(self, x, rare):
        h = torch.relu(self.body(x))
        out = self.head(h)
        if rare.any():  # decided per rank, on its own batch
            return out, self.aux(h[rare]).mean()
        # FIX: every rank uses the aux head every iteration (its loss weighted by zero)
        return out, 0.0 * self.aux(h).sum()


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(WithAux())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for it in range(6):
        x = torch.randn(4, 8, generator=g)
        y = torch.tensor([0, 1, 2, 0]) if not (rank == 1 and it == 3) else \
            torch.tensor([0, 1, 1, 0])  # rank 1's batch 3 has no sample of class 2
        opt.zero_grad()
        out, aux = model(x, y == 2)
        loss = nn.functional.cross_entropy(out, y)
        if aux is not None:
            loss = loss + 0.1 * aux
        loss.backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
