#!/usr/bin/env python
"""A slow but healthy rank: it computes for 12 s while its peer waits, then the job finishes.

After training, rank 1 evaluates a shard that takes 12 s of real CPU work; rank 0 is done at
once and waits in the metric all-reduce. Nothing is wrong: with a hang timeout of 5 s, a
rank whose CPU time keeps advancing is a straggler, not a hang, and the job must run to its
end (exit 0) with no error finding. Killing it would be the bug (ddpdoctor's, not yours).
Source: ddpdoctor's own liveness rule: uneven evaluation shards are common and harmless
while within the process group's timeout.
Run: torchrun --nproc-per-node 2 busy_straggler_finishes.py
"""
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

EVAL_SECONDS = {0: 0.2, 1: 12.0}  # rank 1's evaluation shard is much larger


def evaluate(seconds: float) -> float:
    """Score the model on this rank's shard: CPU-bound work for ``seconds``."""
    x = torch.randn(128, 128)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = torch.tanh(x @ x / 128)
    return float(x.abs().mean())


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    # NOT A BUG: an uneven evaluation; rank 1 takes 12 s, rank 0 waits for it.
    score = evaluate(EVAL_SECONDS.get(rank, EVAL_SECONDS[0]))
    metric = torch.tensor([score])
    dist.all_reduce(metric)
    print(f"rank {rank}: mean score {float(metric) / dist.get_world_size():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
