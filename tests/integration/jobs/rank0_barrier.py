"""A job that hangs: rank 0 calls barrier under `if rank == 0`, rank 1 the next all_reduce.

Before that, one all_reduce goes straight to the process group, where no Python patch sees
it: only torch's flight recorder does.  With READY_DIR set, each rank touches READY_DIR/rank-<r> just before the divergence.
"""

import os
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(10)
dist.all_reduce(t)
dist.group.WORLD.allreduce([t]).wait()
if os.environ.get("READY_DIR"):
    Path(os.environ["READY_DIR"], f"rank-{rank}").touch()
if rank == 0:
    dist.barrier()  # the hang: rank 1 never calls it
dist.all_reduce(t)
dist.destroy_process_group()
