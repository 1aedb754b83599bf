"""Rank 1 blocks on a lock it already holds after a few steps, while rank 0 waits for it in
the next all_reduce.  With READY_DIR set, each rank touches READY_DIR/rank-<r> at that step
(rank 1 just before it takes the lock a second time)."""

import os
import threading
from pathlib import Path

import torch
import torch.distributed as dist

STEPS = 4
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
lock = threading.Lock()
for step in range(STEPS + 1):
    if step == STEPS:
        if os.environ.get("READY_DIR"):
            Path(os.environ["READY_DIR"], f"rank-{rank}").touch()
        if rank == 1:
            lock.acquire()
            lock.acquire()  # the hang: held by this very thread
    dist.all_reduce(t)
dist.destroy_process_group()
