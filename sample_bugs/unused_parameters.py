#!/usr/bin/env python
"""Unused parameters without find_unused_parameters: the second step raises on every rank.

The model has an auxiliary head that this training loop never calls. DDP waits for a
gradient of every parameter before it reduces a bucket; the aux head's never comes, the first
step's reduction never finishes, and the second forward raises "Expected to have finished
reduction in the prior iteration before starting a new one".
Source: pytorch/pytorch#43259, open-mmlab/mmdetection#4742 (FAQ entry).
Run: torchrun --nproc-per-node 2 unused_parameters.py
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
    # BUG: aux_head gets no gradient, and DDP is not told to look for unused parameters.
    model = DDP(TwoHeads())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
