#!/usr/bin/env python
"""A DTensor gathered on one rank only: `full_tensor()` is a collective.

The model's weight is a DTensor sharded over a 1-D device mesh (tensor parallel, as FSDP2
and torch.distributed.tensor.parallel keep parameters). To log its norm, rank 0 calls
`weight.full_tensor()` inside `if rank == 0:`. That call all-gathers the shards from every
rank: rank 0 waits in an all_gather the others never call, while they go on to the next
step's all-reduce.
Source: pytorch/pytorch#125740 and #121356 (full_tensor / redistribute called on a subset
of ranks hangs); huggingface/accelerate#3254 and Lightning-AI/pytorch-lightning#19702
(FSDP2 state gathered on rank 0 only).
Run: torchrun --nproc-per-node 2 dtensor_full_tensor_rank0.py
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
        if rank == 0 and step == 2:
            # BUG: full_tensor() all-gathers the shards: a collective on one rank only
            print(f"weight norm {weight.full_tensor().norm():.3f}", flush=True)
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
