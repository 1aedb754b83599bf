#!/usr/bin/env python
"""Fixed twin of subgroup_skip_4ranks: every rank calls its pair's all-reduce every step.

An empty statistic is all-reduced as zeros instead of skipped.
Run: torchrun --nproc-per-node 4 subgroup_skip_4ranks_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pair = pairs[rank // 2]
    for step in range(4):
        stat = torch.rand(4)
        if rank == 1 and step == 2:
            stat.zero_()  # FIX: an empty statistic still takes part, as zeros
        dist.all_reduce(stat, group=pair)
        loss = torch.tensor([float(stat.sum())])
        dist.all_reduce(loss)
    print(f"rank {rank}: done", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
