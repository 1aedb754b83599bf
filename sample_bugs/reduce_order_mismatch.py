#!/usr/bin/env python
"""Two metrics all-reduced in a different order on different ranks.

Metrics are kept in a dict in the order a rank first computed them, and the positives'
score histogram (shape [4]) only exists once a batch had a positive. Rank 0's first batch has
one, ranks 1 and 2 see theirs later, so rank 0 reduces [pos_hist, loss] while the others
reduce [loss, pos_hist]. The shapes differ, which makes the mix-up visible (same-shape
metrics would be summed into each other silently).
Source: Lightning-AI/torchmetrics#159 (metrics in a different order deadlock),
facebookresearch/maskrcnn-benchmark#309 (loss dict order), mosaicml/composer#2513.
Run: python reduce_order_mismatch.py (spawns 3 ranks itself)
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
    running: dict[str, torch.Tensor] = {}
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
            running[name] = running.get(name, 0) + value

    # BUG: dict order is the order this rank first saw each metric; it differs between ranks.
    for name, total in running.items():
        dist.all_reduce(total)
    if rank == 0:
        print({name: total.tolist() for name, total in running.items()}, flush=True)
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
