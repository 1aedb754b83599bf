#!/usr/bin/env python
"""Fixed twin of unused_parameters.py: DDP is told that some parameters may go unused.

find_unused_parameters=True makes DDP walk the autograd graph after each forward and mark
the parameters that took no part as ready. (Removing the unused head works too, and is faster.)
Run: torchrun --nproc-per-node 2 unused_parameters_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class TwoHeads(nn.Module):
    """A classifier with an auxiliary head that is only used when asked for."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 2)
        self.aux_head = nn.Linear(16, 2)

    def forward(self, x, with_aux: bool = False):
        h = torch.relu(self.body(x))
        return (self.head(h), self.aux_head(h)) if with_aux else self.head(h)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 8, generator=g), torch.randint(0, 2, (16,), generator=g))
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False))
    # FIX: DDP finds the parameters that a forward did not use.
    model = DDP(TwoHeads(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
