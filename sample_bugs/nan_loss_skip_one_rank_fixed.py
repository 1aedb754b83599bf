#!/usr/bin/env python
"""Fixed twin of nan_loss_skip_one_rank.py: the ranks decide together (an all-reduced flag)
and skip the same steps, so every rank runs the same backward passes.
Run: torchrun --nproc-per-node 2 nan_loss_skip_one_rank_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=g)
    x[9, 3] = float("nan")  # a corrupt record: DistributedSampler gives it to rank 1, batch 1
    data = TensorDataset(x, torch.randint(0, 2, (32,), generator=g))
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0])
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # FIX: decide together
            if bad.item():
                if rank == 0:
                    print("a rank had a non-finite loss: every rank skips the batch", flush=True)
                continue
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
