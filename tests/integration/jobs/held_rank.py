"""Rank 1 is held in its own code, polling for a file no one writes (a download marker),
while every other rank waits for it in a barrier.  With READY_DIR set, each rank touches
READY_DIR/rank-<r> when it reaches that point.  A run interrupted before the hang timeout
must say what it saw: the ranks waiting, and where rank 1 is held."""

import os
import time
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
if os.environ.get("READY_DIR"):
    Path(os.environ["READY_DIR"], f"rank-{rank}").touch()
if rank == 1:
    while not os.path.exists("/nonexistent/ddpdoctor-download-done"):
        time.sleep(0.2)
dist.barrier()
dist.destroy_process_group()
