#!/usr/bin/env python
"""Fixed twin of reduce_order_mismatch.py: every rank has every metric and reduces by name.

All metrics are created before the loop (so every rank holds the same set, with the same
shapes) and reduced in sorted name order, which is the same on every rank.
Run: python reduce_order_mismatch_fixed.py (spawns 3 ranks itself)
"""
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD = 3


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(12, dtype=torch.int64)
    y[[0, 7, 8]] = 1  # positives: in rank 0's first batch, in ranks 1 and 2's second
    data = TensorDataset(x, y)
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False))

    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # FIX (1/2): every metric exists on every rank from the start.
    running: dict[str, torch.Tensor] = {"pos_hist": torch.zeros(4), "loss": torch.zeros(1)}
    for xb, yb in loader:
        opt.zero_grad()
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        metrics = {}
        if (yb == 1).any():  # the positives' score histogram needs positives
            scores = out.detach().softmax(1)[yb == 1, 1]
            metrics["pos_hist"] = torch.histc(scores, bins=4, min=0, max=1)
        metrics["loss"] = loss.detach().reshape(1)
        for name, value in metrics.items():
            running[name] += value

    # FIX (2/2): reduce in an order that does not depend on the data.
    for name in sorted(running):
        dist.all_reduce(running[name])
    if rank == 0:
        print({name: total.tolist() for name, total in running.items()}, flush=True)
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
