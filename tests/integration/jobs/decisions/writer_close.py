"""A collective hidden in a method of an object only rank 0 holds: its metrics writer's
close() ends in a barrier (to flush every rank's shard), while rank 1, which has no writer,
finishes training and exits.  FIXED=1: every rank holds a writer and closes it."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class MetricsWriter:
    def __init__(self, path):
        self.path, self.rows = path, []

    def add(self, step, value):
        self.rows.append((step, value))

    def close(self):
        with open(self.path, "w") as f:
            f.writelines(f"{s},{v}\n" for s, v in self.rows)
        dist.barrier()  # every rank's shard is on disk before anyone reads them


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fixed = os.environ.get("FIXED") == "1"
    writer = MetricsWriter(f"{os.environ.get('OUT', '/tmp')}/metrics{rank}.csv") \
        if rank == 0 or fixed else None
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        loss = model(torch.randn(8, 4)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if writer is not None:
            writer.add(step, loss.item())
    if writer is not None:
        writer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
