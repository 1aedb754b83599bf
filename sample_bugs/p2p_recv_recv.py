#!/usr/bin/env python
"""Both ranks receive first: a point-to-point deadlock.

Two pipeline stages exchange activations. Each rank posts a blocking `recv` from its peer
before its `send`, so both wait to receive and neither sends.
Source: the classic blocking send/recv ordering deadlock (pytorch/pytorch discussions of
p2p ordering; the reason torch has batch_isend_irecv).
Run: torchrun --nproc-per-node 2 p2p_recv_recv.py
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
    # BUG: both ranks receive before they send.
    dist.recv(theirs, src=peer)
    dist.send(mine, dst=peer)
    print(f"rank {rank}: exchanged", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
