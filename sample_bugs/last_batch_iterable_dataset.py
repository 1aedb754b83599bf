#!/usr/bin/env python
"""Last-batch hang with a sharded IterableDataset: the shards hold different numbers of records.

Each rank streams its own shard file; rank 0's has 7 records (4 batches), rank 1's has 4
(2 batches). Rank 1 reaches the end-of-epoch barrier while rank 0 waits in the gradient
all-reduce of its third batch: the job hangs. An IterableDataset has no length, so nothing warns.
Source: pytorch/pytorch#38174 (uneven inputs in DDP), Lightning-AI/pytorch-lightning#20404.
Run: python last_batch_iterable_dataset.py (spawns 2 ranks itself)
"""
import datetime
import os
import shutil
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset

WORLD = 2
SHARD_SIZES = (7, 4)  # records in shard-0 and shard-1, as a data pipeline left them


class ShardStream(IterableDataset):
    """Streams the records of one shard file, one "x0,...,x7,label" line a record."""

    def __init__(self, path: Path):
        self.path = path

    def __iter__(self):
        with open(self.path) as f:
            for line in f:
                *x, y = line.split(",")
                yield torch.tensor([float(v) for v in x]), int(y)


def write_shards(root: Path) -> None:
    g = torch.Generator().manual_seed(0)
    for i, n in enumerate(SHARD_SIZES):
        rows = torch.randn(n, 8, generator=g)
        with open(root / f"shard-{i}.csv", "w") as f:
            for row in rows:
                f.write(",".join(f"{v:.4f}" for v in row.tolist()) + f",{int(row[0] > 0)}\n")


def job_dir(job_pid: int) -> Path:
    """Scratch space shared by one job's ranks; removes what killed runs left behind."""
    root = Path(tempfile.gettempdir()) / "ddpdoctor-sample-bugs"
    for old in root.glob("job-*"):
        try:
            os.kill(int(old.name[4:]), 0)
        except ProcessLookupError:  # that job is gone (a hanging bug gets killed)
            shutil.rmtree(old, ignore_errors=True)
        except (PermissionError, ValueError):
            pass
    path = root / f"job-{job_pid}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def worker(rank: int, root: Path, port: int) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    # BUG: every rank trains on its whole shard, however long it is.
    loader = DataLoader(ShardStream(root / f"shard-{rank}.csv"), batch_size=2)

    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = 0
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        batches += 1
    print(f"rank {rank}: {batches} batches done", flush=True)
    dist.barrier()  # end of epoch
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
    root = job_dir(os.getpid())
    write_shards(root)
    mp.spawn(worker, args=(root, free_port()), nprocs=WORLD)
    shutil.rmtree(root, ignore_errors=True)
