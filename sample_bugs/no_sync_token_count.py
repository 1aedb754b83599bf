#!/usr/bin/env python
"""Gradient accumulation by token count: each rank leaves DDP's no_sync() on its own count.

Each rank accumulates micro-batches under `model.no_sync()` until it has seen 40 tokens,
then runs a synced backward (DDP's gradient all-reduce) and steps. Rank 1 draws one long
sequence at micro-batch 5, reaches 40 tokens a micro-batch early and syncs once more than
rank 0 by then: its gradient all-reduce meets rank 0's loss all-reduce for the log, one rank
against one, and the job hangs (gloo may abort on the size mismatch).
Source: modelscope/FunASR#3472 (no_sync aligned with accumulation), karpathy/nanochat#33,
huggingface/transformers#14347's family (a step decided per rank).
Run: torchrun --nproc-per-node 2 no_sync_token_count.py
"""
import contextlib
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    tokens = 0
    for micro in range(12):
        n = 40 if rank == 1 and micro == 5 else 10  # this rank's sequence lengths
        tokens += n
        # BUG: each rank decides from its own token count when to sync.
        sync = tokens >= 40
        ctx = contextlib.nullcontext() if sync else model.no_sync()
        with ctx:
            model(torch.randn(n, 8, generator=g)).pow(2).mean().backward()
        if sync:
            opt.step()
            opt.zero_grad()
            tokens = 0
        if micro % 6 == 5:
            loss = torch.tensor([float(micro)])
            dist.all_reduce(loss)  # the loss for the log
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
