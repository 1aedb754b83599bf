#!/usr/bin/env python
"""The rendezvous port is already taken: rank 0 cannot host the store, nothing in the code.

The job uses a fixed MASTER_PORT (29500 is torch's default). Another process on the host
already listens there: here, a listener this script opens itself, standing for a previous
run that has not exited or a second job on the same machine. Rank 0's init_process_group
must host the TCPStore on that port and raises DistNetworkError ("... name: EADDRINUSE,
message: address already in use"); rank 1 connects to the stranger and waits. The training
code is fine: the fix is a free port.
Source: pytorch/pytorch#73320 (port 29500 hard-coded as the default, another job holds it),
pytorch/pytorch#85604; meta-pytorch/torchtune#392 ("Can't run 2 finetunes at the same time").
Run: python store_port_taken.py (spawns 2 ranks itself)
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


def main() -> None:
    # Another process already listens on the port the job was told to use.
    stranger = socket.socket()
    stranger.bind(("127.0.0.1", 0))
    stranger.listen(8)
    port = stranger.getsockname()[1]  # BUG: the job's fixed MASTER_PORT is taken
    mp.spawn(worker, args=(port,), nprocs=WORLD)
    stranger.close()


if __name__ == "__main__":
    main()
