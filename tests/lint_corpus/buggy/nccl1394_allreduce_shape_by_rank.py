# Reconstructed from https://github.com/NVIDIA/nccl/issues/1394
# (a tensor whose shape depends on the rank is all-reduced: a hang, or a gloo size error).
import os

import torch
import torch.distributed as dist

rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl", rank=rank, world_size=4)
device = torch.device("cuda", rank)
torch.cuda.set_device(device)

if rank == 0:
    a = 100
    b = 2560
else:
    a = 200
    b = 2560

x = torch.ones(a, b).to(device)
dist.all_reduce(x, op=dist.ReduceOp.SUM)
print(f"rank {dist.get_rank()} shape {x.shape}")
