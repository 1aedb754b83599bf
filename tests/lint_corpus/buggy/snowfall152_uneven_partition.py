# Reconstructed from https://github.com/k2-fsa/snowfall/issues/152
# (a partition of ceil(total / world_size) items a rank: the last rank gets fewer, leaves the
# loop early, and the others wait in backward's all-reduce).
import math

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank: int, world_size: int):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DDP(torch.nn.Linear(10, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 10
    per_partition = int(math.ceil(total / float(world_size)))
    partition_start = rank * per_partition
    partition_end = min(partition_start + per_partition, total)
    for i in range(partition_start, partition_end):
        loss = model(torch.rand(4, 10)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(3,), nprocs=3)
