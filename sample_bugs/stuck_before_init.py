#!/usr/bin/env python
"""A rank is stuck in a download before init_process_group: the others wait in the rendezvous.

Before joining the process group, rank 1 fetches its tokenizer from a mirror. The mirror
accepts the connection and then sends nothing, and the download has no timeout: rank 1
blocks in `recv` forever. Rank 0 waits in init_process_group for it, and without a
diagnosis the job sits there until the rendezvous times out (30 minutes by default; 120 s
here). No collective was ever called, so there is nothing in a collective to look at.
Source: jobs that hang at start-up because one rank blocks in a download or a file lock
before init (e.g. huggingface/transformers and datasets reports of hangs in from_pretrained
on one rank; the "rank 0 downloads first" patterns).
Run: torchrun --nproc-per-node 2 stuck_before_init.py
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
    with socket.create_connection(address) as conn:
        # BUG: no timeout: a stalled mirror blocks this rank forever.
        conn.settimeout(None)
        return conn.recv(1 << 16)


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
    dist.destroy_process_group()
    mirror.close()


if __name__ == "__main__":
    main()
