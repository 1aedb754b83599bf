#!/usr/bin/env python
"""Fixed twin of worker_numpy_seed.py: the loader gets its own generator, seeded per rank.

DataLoader(generator=torch.Generator().manual_seed(SEED + rank)) gives each rank's workers
their own base seed (and so their own numpy seeds), while the model's initialisation keeps
the shared seed.
Run: python worker_numpy_seed_fixed.py (spawns 2 ranks itself)
"""
import datetime
import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

WORLD = 2
SEED = 42


class Jittered(Dataset):
    """16 samples of 8 values; each read adds numpy noise (the augmentation)."""

    def __init__(self):
        rng = np.random.default_rng(1234)
        self.x = rng.standard_normal((16, 8)).astype(np.float32)
        self.y = rng.integers(0, 2, 16)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        noise = np.random.uniform(-0.1, 0.1, 8).astype(np.float32)  # the global numpy RNG
        return torch.from_numpy(self.x[i] + noise), int(self.y[i])


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(SEED)  # the same model initialisation on every rank
    data = Jittered()
    sampler = DistributedSampler(data, shuffle=True)
    # FIX: a per-rank generator for the loader: its workers' seeds differ between ranks.
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=2,
                        multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(SEED + rank))
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print(f"rank {rank}: done", flush=True)
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
