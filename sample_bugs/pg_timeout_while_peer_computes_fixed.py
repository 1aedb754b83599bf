#!/usr/bin/env python
"""Fixed twin of pg_timeout_while_peer_computes: the timeout covers the longest evaluation.

The process group keeps a timeout well above the slowest rank's evaluation (120 s here), and
the evaluation itself is short enough for the test.
Run: torchrun --nproc-per-node 2 pg_timeout_while_peer_computes_fixed.py
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

EVAL_SECONDS = {0: 0.2, 1: 1.0}


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
    torch.manual_seed(rank)
    # FIX: a timeout longer than any rank's evaluation.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    score = evaluate(EVAL_SECONDS[rank])
    metric = torch.tensor([score])
    dist.all_reduce(metric)
    print(f"rank {rank}: mean score {float(metric) / dist.get_world_size():.3f}", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
