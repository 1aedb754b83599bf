"""A tiny DDP training job whose data bug is chosen by BUG=<name> in the environment.

healthy          DistributedSampler(shuffle) + set_epoch, model seeded alike, per-rank seed
seed_model_only  model seeded alike on every rank, data and dropout seeded per rank
seed_no_random   one seed on every rank, but no randomness during training (no dropout)
seed             one seed on every rank and dropout during training (seed_collision)
worker_seed      one seed on every rank, only the workers draw (augment) (seed_collision)
worker_seed_ok   workers augment randomly, the seed differs per rank
stale            DistributedSampler(shuffle) without set_epoch (stale_shuffle)
duplicate        a plain DataLoader on every rank: no sharding (duplicate_data)
uneven_sampler   a custom sampler that gives rank 0 one batch fewer (uneven_batches)
uneven_split     a hand-split tensor, 25 samples: 13 + 12 (uneven_batches)
even_split       a hand-split tensor, 24 samples: 12 + 12 (healthy)
uneven_iterable  a sharded IterableDataset without len, uneven shards (uneven_batches)
even_iterable    a sharded IterableDataset, even shards (healthy)
straggler        rank 1 computes 0.2 s longer each step (straggler)
val_rank0        healthy, and rank 0 alone evaluates on a validation loader each epoch
val_rank0_one_line  the same, with training and evaluation iterated from one line (as
                 a framework's engine does)
uneven_barrier   uneven_split, then a barrier after the training loop (uneven_batches)

WORKERS_START=spawn (or forkserver): how the worker_seed loaders start their workers
(default: the platform's, fork on Linux).
"""

import datetime
import os
import random
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import (DataLoader, DistributedSampler, IterableDataset, Sampler,
                              TensorDataset)

BUG = os.environ.get("BUG", "healthy")
EPOCHS = int(os.environ.get("EPOCHS", "2"))
WORKERS_START = os.environ.get("WORKERS_START") or None
BATCH = 4


class Augmented(torch.utils.data.Dataset):
    """Random noise added per sample (randomness consumed in the workers)."""

    def __init__(self, n: int):
        self.x = torch.arange(n * 8, dtype=torch.float32).reshape(n, 8)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i] + torch.rand(8), torch.zeros(1)


class Shards(IterableDataset):
    """Each rank reads its own shard of a stream (no __len__)."""

    def __init__(self, sizes: list[int], rank: int):
        self.n = sizes[rank]
        self.rank = rank

    def __iter__(self):
        for i in range(self.n):
            yield torch.full((8,), float(self.rank * 1000 + i)), torch.zeros(1)


class RankSampler(Sampler):
    """A custom sampler: its own split of the indices, one fewer batch on rank 0."""

    def __init__(self, n: int, rank: int):
        self.idx = list(range(rank, n, 2))[: 20 - (BATCH if rank == 0 else 0)]

    def __iter__(self):
        return iter(self.idx)

    def __len__(self) -> int:
        return len(self.idx)


def make_loader(rank: int, world: int) -> DataLoader:
    x = torch.randn(48, 8, generator=torch.Generator().manual_seed(7))
    y = torch.randn(48, 1, generator=torch.Generator().manual_seed(8))
    ds = TensorDataset(x, y)
    if BUG == "duplicate":
        return DataLoader(ds, batch_size=BATCH)
    if BUG == "uneven_sampler":
        return DataLoader(ds, batch_size=BATCH, sampler=RankSampler(48, rank))
    if BUG in ("uneven_split", "even_split", "uneven_barrier"):
        n = 24 if BUG == "even_split" else 25
        chunk = -(-n // world)  # 25 samples: 13 + 12 -> 4 and 3 batches
        part = x[:n][rank * chunk:(rank + 1) * chunk]
        return DataLoader(TensorDataset(part, torch.zeros(len(part), 1)), batch_size=BATCH)
    if BUG in ("uneven_iterable", "even_iterable"):
        sizes = [12, 16] if BUG == "uneven_iterable" else [16, 16]
        return DataLoader(Shards(sizes, rank), batch_size=BATCH)
    if BUG in ("worker_seed", "worker_seed_ok"):
        ds = Augmented(32)
        return DataLoader(ds, batch_size=BATCH, num_workers=2,
                          sampler=DistributedSampler(ds, shuffle=False),
                          multiprocessing_context=WORKERS_START)
    return DataLoader(ds, batch_size=BATCH, sampler=DistributedSampler(ds, shuffle=True))


def one_pass(loader: DataLoader, step) -> None:
    for batch in loader:  # every loader is iterated here
        step(batch)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same model on every rank (normal)
    random.seed(0)
    dropout = 0.0 if BUG in ("seed_no_random", "worker_seed") else 0.2
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(dropout), nn.Linear(16, 1))
    if BUG not in ("seed", "seed_no_random", "worker_seed"):
        torch.manual_seed(1000 + rank)  # data order / dropout / augmentation per rank
        random.seed(1000 + rank)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loader = make_loader(rank, world)
    val = DataLoader(TensorDataset(torch.randn(20, 8)), batch_size=BATCH)
    for epoch in range(EPOCHS):
        if BUG == "val_rank0" and rank == 0:
            with torch.no_grad():
                sum(model(x).sum() for (x,) in val)
        sampler = loader.sampler
        if isinstance(sampler, DistributedSampler) and BUG != "stale" and sampler.shuffle:
            sampler.set_epoch(epoch)
        if BUG == "val_rank0_one_line":
            if rank == 0:
                with torch.no_grad():
                    one_pass(val, lambda b: model(b[0]))
            one_pass(loader, lambda b: (opt.zero_grad(), nn.functional.mse_loss(
                ddp(b[0]), b[1]).backward(), opt.step()))
            continue
        for x, y in loader:
            if BUG == "straggler" and rank == 1:
                time.sleep(0.2)
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if BUG not in ("seed_no_random", "worker_seed"):
                random.random()  # python randomness used in training
    if BUG == "uneven_barrier":
        dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
