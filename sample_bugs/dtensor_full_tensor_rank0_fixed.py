#!/usr/bin/env python
"""The fixed twin of dtensor_full_tensor_rank0.py: every rank gathers, rank 0 prints.

`full_tensor()` all-gathers the shards, so every rank calls it; only the print stays under
`if rank == 0:`.
Run: torchrun --nproc-per-node 2 dtensor_full_tensor_rank0_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    weight = distribute_tensor(torch.randn(8 * world, 4), mesh, [Shard(0)])
    for step in range(6):
        local = weight.to_local()
        loss = local.pow(2).sum().reshape(1)
        dist.all_reduce(loss)  # the step's loss, summed over the shards
        if step == 2:
            full = weight.full_tensor()  # FIX: a collective: every rank calls it
            if rank == 0:
                print(f"weight norm {full.norm():.3f}", flush=True)
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
