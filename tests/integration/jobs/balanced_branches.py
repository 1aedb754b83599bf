"""Healthy: per-rank branches that stay balanced.  Even and odd ranks take different paths
(different tensors, helpers, local work, a rank-0-only print and file write), but every rank
makes the same collectives in the same order with the same shapes; an all_to_all_single
whose split sizes are exchanged first moves an uneven number of rows.  Must end with exit 0
and no error or warning."""

import os
import tempfile

import torch
import torch.distributed as dist


def even_side(step: int) -> torch.Tensor:
    x = torch.arange(4, dtype=torch.float32) + step
    dist.all_reduce(x)
    return x


def odd_side(step: int) -> torch.Tensor:
    y = torch.zeros(4)
    for _ in range(3):  # more local work, the same collective
        y = y + 1
    dist.all_reduce(y)
    return y


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
for step in range(6):
    out = even_side(step) if rank % 2 == 0 else odd_side(step)
    if rank == 0:
        print(f"step {step}: {out.sum():.1f}", flush=True)
        with tempfile.NamedTemporaryFile("w", delete=True) as f:
            f.write(str(float(out.sum())))  # rank 0's own bookkeeping, no collective
    else:
        flag = torch.tensor([0.0])
        flag += 1  # the others' own bookkeeping, no collective
    send = [1 + (rank + step + j) % 3 for j in range(world)]  # rows for each peer
    counts = torch.tensor(send)
    got = torch.empty_like(counts)
    dist.all_to_all_single(got, counts)  # the split sizes first
    recv = got.tolist()
    rows = torch.empty(sum(recv), 2)
    dist.all_to_all_single(rows, torch.ones(sum(send), 2), output_split_sizes=recv,
                           input_split_sizes=send)
    dist.barrier()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
