"""A tiny job that hangs: rank 1 calls broadcast where rank 0 calls all_reduce (run with 2 ranks)."""

import datetime
import time

import torch
import torch.distributed as dist


def train_step(step: int) -> None:
    dist.all_reduce(torch.ones(64, 8))
    print(f"rank {dist.get_rank()} step {step}", flush=True)


def sync_loss_scale() -> None:
    dist.broadcast(torch.ones(1), src=0)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    for step in range(4):
        train_step(step)
        time.sleep(0.2)
    if rank == 1:
        sync_loss_scale()
    train_step(4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
