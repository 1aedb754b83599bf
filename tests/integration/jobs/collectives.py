"""A small DDP-style job for tests: BUG=<name> in the environment picks what goes wrong.

Runs under torchrun (RANK/WORLD_SIZE from the environment) or from spawn_collectives.py.
CULPRIT (default: the last rank) is the rank that misbehaves.
"""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist


def main() -> None:
    bug = os.environ.get("BUG", "none")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    culprit = int(os.environ.get("CULPRIT", world - 1))
    for _ in range(3):
        dist.all_reduce(torch.ones(10))
        dist.broadcast(torch.zeros(4), src=0)
    if bug == "shape":
        dist.all_reduce(torch.ones(11 if rank == culprit else 10))
    if bug == "dtype":
        dist.all_reduce(torch.ones(10, dtype=torch.float64 if rank == culprit else torch.float32))
    if bug == "op":
        if rank == culprit:
            dist.broadcast(torch.ones(10), src=0)
        dist.all_reduce(torch.ones(10))
    if bug == "raise" and rank == culprit:
        raise ValueError(f"boom on rank {rank}")
    if bug == "sigkill" and rank == culprit:
        os.kill(os.getpid(), signal.SIGKILL)
    if bug == "sleep" and rank == culprit:
        time.sleep(600)
    if bug == "barrier_rank0":
        if rank == 0:
            dist.barrier()
    if bug == "barrier_node1":  # the second rank of the node started with NODE_TAG=1
        if os.environ.get("NODE_TAG") == "1" and os.environ.get("LOCAL_RANK") == "1":
            dist.barrier()
    if bug == "long":  # a steady job: STEPS all_reduces, 0.1 s apart
        for _ in range(int(os.environ.get("STEPS", "100"))):
            dist.all_reduce(torch.ones(10))
            time.sleep(0.1)
    if bug == "conditional":
        if rank == culprit:
            dist.all_reduce(torch.ones(3))
    dist.all_reduce(torch.ones(5))
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
