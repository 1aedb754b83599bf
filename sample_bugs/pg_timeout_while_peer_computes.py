#!/usr/bin/env python
"""A process-group timeout fires on the rank that waits, while its peer is still computing.

The process group is made with a 4 s timeout (tuned down "to fail fast"). After training,
rank 1 runs a 12 s evaluation of its shard (real CPU work) before the metric all-reduce; rank 0,
whose shard is small, is in that all-reduce at once. After 4 s gloo raises a timeout on rank 0,
which dies; rank 1 then finds its peer gone. The error is rank 0's, the cause is rank 1: it
was still computing in `evaluate(...)`.
Source: common reports of "Watchdog caught collective operation timeout" / gloo timeouts
while one rank evaluates or saves alone (e.g. the PyTorch forums and Lightning issues on
long validation on one rank).
Run: torchrun --nproc-per-node 2 pg_timeout_while_peer_computes.py
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

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
    torch.manual_seed(rank)
    # BUG: a process-group timeout shorter than the slowest rank's evaluation.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
    score = evaluate(EVAL_SECONDS[rank])
    metric = torch.tensor([score])
    dist.all_reduce(metric)
    print(f"rank {rank}: mean score {float(metric) / dist.get_world_size():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
