#!/usr/bin/env python
"""The fixed twin of all_to_all_split_own_data.py: the split sizes are exchanged first.

Before the tokens, each rank all-to-alls its per-rank counts: what rank j sends to rank i is
what rank i receives from rank j. The uneven step then simply moves more tokens to rank 0.
Run: torchrun --nproc-per-node 2 all_to_all_split_own_data_fixed.py
"""
import datetime
import os

import torch
import torch.distributed as dist


def route(step: int, rank: int, world: int, tokens: int) -> list[int]:
    """How many of this rank's tokens go to each rank (its router's choice this step)."""
    if step == 3 and rank == 0:
        return [tokens - 2] + [2 // (world - 1)] * (world - 2) + [2 - 2 // (world - 1) * (world - 2)]
    return [tokens // world] * world


def main() -> None:
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    tokens = 8
    for step in range(6):
        x = torch.randn(tokens, 4)
        send = route(step, rank, world, tokens)
        counts = torch.tensor(send)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)  # FIX: exchange the split sizes first
        recv = recv_counts.tolist()
        out = torch.empty(sum(recv), 4)
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)
        loss = out.pow(2).mean().reshape(1)
        dist.all_reduce(loss)
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
