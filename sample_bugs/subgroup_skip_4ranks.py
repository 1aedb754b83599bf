#!/usr/bin/env python
"""Four ranks in two pair groups; rank 1 skips its pair's all-reduce once.

Ranks {0, 1} and {2, 3} each average a statistic within their pair every step, then the
whole world averages the loss. At step 2 rank 1 finds its local statistic empty and skips the
pair all-reduce ("nothing to sync"); it goes on to the world all-reduce. Rank 0 waits in the
pair all-reduce for rank 1, ranks 1-3 wait in the world all-reduce for rank 0: a hang whose
only cause is rank 1 (rank 0 merely waits for it).
Source: conditional collectives inside process subgroups (e.g. pytorch/pytorch#38174's
family of "a rank skips a collective" hangs), here in pair groups.
Run: torchrun --nproc-per-node 4 subgroup_skip_4ranks.py
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
        # BUG: rank 1 skips the pair's collective when its statistic is "empty".
        empty = rank == 1 and step == 2
        if not empty:
            dist.all_reduce(stat, group=pair)
        loss = torch.tensor([float(stat.sum())])
        dist.all_reduce(loss)
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
