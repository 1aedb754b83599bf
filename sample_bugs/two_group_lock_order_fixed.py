#!/usr/bin/env python
"""Fixed twin of two_group_lock_order: every rank takes the groups in the same order.

Run: torchrun --nproc-per-node 2 two_group_lock_order_fixed.py
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
    # FIX: one order on every rank: parameters, then metrics.
    dist.all_reduce(params, group=params_group)
    dist.all_reduce(metrics, group=metrics_group)
    print(f"rank {rank}: synced", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
