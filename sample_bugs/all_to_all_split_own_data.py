#!/usr/bin/env python
"""Expert-parallel token dispatch: each rank sizes the all-to-all from its own routing only.

A toy mixture-of-experts layer sends each token to the rank that holds its expert with
`all_to_all_single`. Each rank counts how many of its own tokens go to each rank
(input_split_sizes), but takes the counts it will receive (output_split_sizes) from its own
routing as well, instead of exchanging them first. The shapes every rank passes agree (8
tokens in, 8 out), so nothing looks wrong until a batch routes unevenly: at step 3 the
ranks' splits disagree, gloo aborts the exchange on one rank and the other is left in it.
One rank against one: neither is "the odd one out"; the split sizes are.
Source: pytorch/pytorch#111432 and deepspeedai/DeepSpeed#5066 (all_to_all_single hangs or
errors on inconsistent split sizes in MoE dispatch); NVIDIA/Megatron-LM token dispatchers,
which all-to-all the counts first.
Run: torchrun --nproc-per-node 2 all_to_all_split_own_data.py
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
        recv = list(send)  # BUG: what this rank receives is decided by the others' routing
        out = torch.empty(sum(recv), 4)
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)
        loss = out.pow(2).mean().reshape(1)
        dist.all_reduce(loss)
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
