#!/usr/bin/env python
"""The fixed twin of warmup_lr_by_hand_rank0.py: every rank warms its lr up; only the print
stays on rank 0.
Run: torchrun --nproc-per-node 2 warmup_lr_by_hand_rank0_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BASE_LR, WARMUP = 0.05, 8


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)))
    opt = torch.optim.AdamW(model.parameters(), lr=BASE_LR, weight_decay=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(12):
        if rank == 0:
            print(f"step {step}", flush=True)
        for group in opt.param_groups:  # FIX: the warmup on every rank
            group["lr"] = BASE_LR * min(1.0, (step + 1) / WARMUP)
        opt.zero_grad()
        model(torch.randn(4, 8, generator=g)).square().mean().backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
