#!/usr/bin/env python
"""Fixed twin of p2p_recv_recv: rank 0 sends first, rank 1 receives first.

Run: torchrun --nproc-per-node 2 p2p_recv_recv_fixed.py
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
    peer = 1 - rank
    mine, theirs = torch.randn(4), torch.empty(4)
    # FIX: opposite orders on the two ranks (or batch_isend_irecv).
    if rank == 0:
        dist.send(mine, dst=peer)
        dist.recv(theirs, src=peer)
    else:
        dist.recv(theirs, src=peer)
        dist.send(mine, dst=peer)
    print(f"rank {rank}: exchanged", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
