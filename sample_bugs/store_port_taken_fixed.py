#!/usr/bin/env python
"""Fixed: the job asks for a free port instead of a fixed one that may be taken.

Run: python store_port_taken_fixed.py (spawns 2 ranks itself)
"""
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
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


def main() -> None:
    # Another process already listens on the port the job was told to use.
    stranger = socket.socket()
    stranger.bind(("127.0.0.1", 0))
    stranger.listen(8)
    # FIX: a port nobody holds (torchrun: --standalone or --rdzv-endpoint localhost:0)
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD)
    stranger.close()


if __name__ == "__main__":
    main()
