"""The last rank works for WORK_S seconds (the others wait in an all-reduce), then raises:
the job fails, and its launcher ends it (exit 1)."""
import os
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(4)
dist.all_reduce(t)
if rank == world - 1:
    end = time.time() + float(os.environ.get("WORK_S", "2.5"))
    while time.time() < end:
        pass
    raise RuntimeError("a bad batch")
dist.all_reduce(t)
