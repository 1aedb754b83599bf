#!/usr/bin/env python
"""Fixed twin of allgather_uneven_last_batch.py: pad every batch to a common size, then trim.

The ranks first all-gather their batch sizes, pad the predictions to the largest one, gather
tensors of one shape, and drop the padding (what accelerate's pad_across_processes does).
Run: python allgather_uneven_last_batch_fixed.py (spawns 3 ranks itself)
"""
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

WORLD = 3


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)  # the same evaluation model on every rank
    model = nn.Linear(8, 3).eval()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(11, 8, generator=g), torch.randint(0, 3, (11,), generator=g))
    shard = Subset(data, list(range(rank, len(data), WORLD)))  # unpadded: 4, 4, 3 samples
    loader = DataLoader(shard, batch_size=2)

    gathered = []
    with torch.no_grad():
        for x, _ in loader:
            preds = model(x).argmax(1)
            # FIX: agree on the sizes first, gather equal shapes, then drop the padding.
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(WORLD)]
            dist.all_gather(sizes, torch.tensor([len(preds)]))
            longest = int(max(sizes))
            padded = torch.cat([preds, preds.new_full((longest - len(preds),), -1)])
            parts = [torch.empty_like(padded) for _ in range(WORLD)]
            dist.all_gather(parts, padded)
            gathered.extend(p[: int(n)] for p, n in zip(parts, sizes))
    if rank == 0:
        print(f"gathered {sum(len(p) for p in gathered)} predictions", flush=True)
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


def free_port() -> int:
    """A free port below the kernel's ephemeral ports (32768 up): one of those may be taken by
    an outgoing connection before rank 0 listens on it."""
    for step in range(12000):
        port = 20000 + (os.getpid() + step) % 12000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port in 20000-31999")


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD)
