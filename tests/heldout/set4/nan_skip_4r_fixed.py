# Regression model trained with DDP on per-rank sensor shards.  A rank-local
# finite-loss guard skips "bad" batches.  One shard has a glitched reading.
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 8
BATCH = 16
FEAT = 12


def sensor_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(BATCH, FEAT, generator=g)
    y = x[:, :3].sum(dim=1, keepdim=True)
    if rank == 2 and step == 3:
        x[5, 7] = float("inf")  # a glitched sensor reading in shard 2
    return x, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(FEAT, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    for step in range(STEPS):
        x, y = sensor_batch(rank, step)
        loss = F.mse_loss(model(x), y)
        bad = torch.tensor([0.0 if torch.isfinite(loss) else 1.0])
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # decide the skip on all ranks together
        if bad.item() > 0:
            print(f"[rank {rank}] step {step}: non-finite loss on some rank, skipping batch", flush=True)
            opt.zero_grad()
            continue
        loss.backward()
        opt.step()
        opt.zero_grad()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    dist.barrier()
    if rank == 0:
        print("training finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
