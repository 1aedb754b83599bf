#!/usr/bin/env python
"""all_gather of per-rank predictions whose last batch is smaller on one rank.

Evaluation splits 11 samples between 3 ranks without padding (so no sample counts twice):
ranks 0 and 1 get 4 samples, rank 2 gets 3. Each batch's predictions are all-gathered into
buffers shaped like the local batch, and rank 2's last batch holds 1 sample, not 2: the
collective's shapes differ and the job hangs (NCCL) or aborts (gloo).
Source: Lightning-AI/pytorch-lightning#7773, huggingface/accelerate#19 (pad_across_processes).
Run: python allgather_uneven_last_batch.py (spawns 3 ranks itself)
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
            # BUG: assumes every rank's batch has the same size as this one.
            parts = [torch.empty_like(preds) for _ in range(WORLD)]
            dist.all_gather(parts, preds)
            gathered.extend(parts)
    if rank == 0:
        print(f"gathered {sum(len(p) for p in gathered)} predictions", flush=True)
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
