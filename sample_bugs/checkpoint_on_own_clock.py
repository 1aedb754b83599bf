#!/usr/bin/env python
"""A checkpoint taken when each rank's own clock says so, followed by a barrier.

Every 2 s of wall time a rank saves its checkpoint and calls `dist.barrier()`. Rank 1 spends
2.5 s writing a log after step 3, so its clock passes the interval first: it saves and
enters the barrier while ranks 0, 2 and 3, whose clocks say 1 s, start step 4 and wait in
its gradient all-reduce.
Source: instructlab/training#566 (barriers after checkpoint saving), Lightning-AI's
ModelCheckpoint(train_time_interval=...) run per rank.
Run: torchrun --nproc-per-node 4 checkpoint_on_own_clock.py
"""
import datetime
import os
import tempfile
import time

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
    out = tempfile.mkdtemp()
    last_save = time.monotonic()
    for step in range(8):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        if rank == 1 and step == 3:
            time.sleep(2.5)  # a slow log write on this rank
        # BUG: each rank reads its own clock to decide when to checkpoint.
        if time.monotonic() - last_save > 2.0:
            torch.save(model.module.state_dict(), os.path.join(out, f"ckpt{rank}.pt"))
            dist.barrier()
            last_save = time.monotonic()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
