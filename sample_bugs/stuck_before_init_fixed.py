#!/usr/bin/env python
"""Fixed twin of stuck_before_init: the download has a timeout and falls back to a cached copy.

Run: torchrun --nproc-per-node 2 stuck_before_init_fixed.py
"""
import datetime
import os
import socket

import torch
import torch.distributed as dist


def stalled_mirror() -> socket.socket:
    """A local "mirror" that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return server


def download_tokenizer(address: tuple[str, int]) -> bytes:
    try:
        with socket.create_connection(address, timeout=1.0) as conn:
            return conn.recv(1 << 16)  # FIX: at most 1 s without data
    except OSError:  # socket.timeout included: use the cached copy
        return b"cached"


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    torch.manual_seed(rank)
    mirror = stalled_mirror()
    vocab = b"cached"
    if rank == 1:
        vocab = download_tokenizer(mirror.getsockname())
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    size = torch.tensor([float(len(vocab))])
    dist.all_reduce(size)
    print(f"rank {rank}: vocab ready", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()
    mirror.close()


if __name__ == "__main__":
    main()
