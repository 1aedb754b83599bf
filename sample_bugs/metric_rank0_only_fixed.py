#!/usr/bin/env python
"""Fixed twin of metric_rank0_only.py: every rank reduces the metric, only rank 0 prints it.

A collective is called by all the ranks of its group; keep only the printing (or logging)
behind `if rank == 0:`.
Run: python metric_rank0_only_fixed.py (spawns 3 ranks itself)
"""
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD = 3


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(24, 8, generator=g), torch.randint(0, 2, (24,), generator=g))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            val_loss = nn.functional.cross_entropy(model(data.tensors[0][rank::WORLD]),
                                                   data.tensors[1][rank::WORLD]).reshape(1)
        # FIX: every rank calls the collective; only the printing is rank 0's.
        dist.all_reduce(val_loss)
        if rank == 0:
            print(f"epoch {epoch}: val loss {val_loss.item() / WORLD:.4f}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


def free_port() -> int:
    """A free port below the kernel's ephemeral ports (32768 up): one of those may be taken by
    an outgoing connection before rank 0 listens on it."""
    for step in range(12000):
        port = 20000 + (os.getpid() + step) % 12000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port in 20000-31999")


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD)
