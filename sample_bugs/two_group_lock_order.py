#!/usr/bin/env python
"""Two process groups taken in opposite orders: a lock-order deadlock.

Both ranks belong to a "params" group and a "metrics" group. Rank 0 syncs parameters then
metrics; rank 1, through a different code path (it logs first), syncs metrics then
parameters. Rank 0 waits in the params all-reduce for rank 1, rank 1 waits in the metrics
all-reduce for rank 0: each holds what the other needs. Neither rank alone is at fault.
Source: the lock-order deadlock of collectives on several process groups (e.g. pipeline and
data-parallel groups entered in different orders; pytorch/pytorch discussions of
"collectives must be called in the same order on every rank").
Run: torchrun --nproc-per-node 2 two_group_lock_order.py
"""
import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    params_group = dist.new_group([0, 1])
    metrics_group = dist.new_group([0, 1])
    params, metrics = torch.randn(8), torch.randn(2)
    # BUG: the order of the two groups' collectives depends on the rank.
    if rank == 0:
        dist.all_reduce(params, group=params_group)
        dist.all_reduce(metrics, group=metrics_group)
    else:
        dist.all_reduce(metrics, group=metrics_group)
        dist.all_reduce(params, group=params_group)
    print(f"rank {rank}: synced", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
