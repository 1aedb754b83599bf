#!/usr/bin/env python
"""`continue` on a NaN loss, decided by each rank alone: one rank skips a step's backward.

Rank 1's shard holds a corrupt sample (a NaN feature) in its second batch; its loss is NaN,
and the loop skips the batch with `continue` before `loss.backward()`. Rank 0's loss is
finite, so it runs backward: its gradient all-reduce meets rank 1's all-reduce of the NEXT
batch, and the ranks train one step out of step, averaging gradients of different
iterations, until rank 1 runs out of batches and leaves while rank 0 waits in its last
backward.
Source: huggingface/transformers#14347 and Lightning-AI/pytorch-lightning#5243 (skipping a
step on NaN/inf loss on one rank hangs DDP), pytorch/pytorch#38174's family.
Run: torchrun --nproc-per-node 2 nan_loss_skip_one_rank.py
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
            if not torch.isfinite(loss):
                print(f"rank {rank}: non-finite loss, skipping the batch", flush=True)
                continue  # BUG: this rank alone skips the step's gradient all-reduce
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
