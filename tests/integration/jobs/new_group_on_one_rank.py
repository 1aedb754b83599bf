#!/usr/bin/env python
"""A process group created by one rank only: every later group is shifted, the job hangs.

new_group is a collective over every rank: all ranks must call it, with the same ranks, in
the same order, even the ranks that are not members. Here rank 0 alone makes an evaluation
group of its own under `if rank == 0:`; the data-parallel group created next is then rank 0's
second group and rank 1's first: rank 0 waits in new_group, rank 1 in the step's first
all-reduce.
Source: the torch.distributed.new_group docs ("requires that all processes in the main group
enter this function, even if they are not going to be members of the group"),
pytorch/pytorch#25390, pytorch/pytorch#81291.
Run: torchrun --nproc-per-node 2 new_group_on_one_rank.py
"""
import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    dist.all_reduce(torch.ones(4))
    if rank == 0:
        # BUG: a group made by rank 0 only; rank 1 never calls new_group for it.
        eval_group = dist.new_group([0])
        print("evaluation group:", dist.get_process_group_ranks(eval_group), flush=True)
    data_group = dist.new_group([0, 1])
    for step in range(3):
        dist.all_reduce(torch.ones(1))  # the loss, for the log
        dist.all_reduce(torch.ones(4), group=data_group)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
