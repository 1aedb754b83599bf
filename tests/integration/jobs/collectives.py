"""A tiny torchrun-style job whose behaviour is chosen by BUG=<name> in the environment."""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

BUG = os.environ.get("BUG", "none")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    culprit = int(os.environ.get("CULPRIT", world - 1))
    for step in range(3):
        x = torch.ones(10)
        dist.all_reduce(x)
        dist.broadcast(torch.zeros(4), src=0)
    if BUG == "shape" and rank == culprit:
        dist.all_reduce(torch.ones(11))
    elif BUG == "dtype" and rank == culprit:
        dist.all_reduce(torch.ones(10, dtype=torch.float64))
    elif BUG == "op" and rank == culprit:
        dist.broadcast(torch.ones(10), src=0)
    elif BUG == "raise" and rank == culprit:
        raise ValueError(f"boom on rank {rank}")
    elif BUG == "sigkill" and rank == culprit:
        os.kill(os.getpid(), signal.SIGKILL)
    elif BUG == "barrier_rank0":
        if rank == 0:
            dist.barrier()
    elif BUG == "conditional":
        if rank == culprit:
            dist.all_reduce(torch.ones(3))
    else:
        dist.all_reduce(torch.ones(10))
    dist.all_reduce(torch.ones(5))
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
