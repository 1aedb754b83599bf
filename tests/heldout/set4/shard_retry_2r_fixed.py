# Each rank loads its own pre-tokenized shard from a network filesystem that is
# only eventually consistent, so a missing file is retried until it shows up.
# The export job that writes the shards failed on shard 1.
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])


def shard_path(rank, world):
    return os.path.join(WORK, "export", f"train-{rank:05d}-of-{world:05d}.pt")


def export_job(world):
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(os.path.join(WORK, "export"))
    for r in range(world):
        if r == 1:
            continue  # this export task crashed; its shard was never written
        write_shard(r, world)


def write_shard(r, world):
    g = torch.Generator().manual_seed(r)
    torch.save(torch.randn(48, 12, generator=g), shard_path(r, world))


def load_shard(path):
    attempt = 0
    while attempt < 15:  # bounded: give the filesystem ~3 s, not forever
        try:
            return torch.load(path)
        except FileNotFoundError:
            attempt += 1
            if attempt % 10 == 0:
                print(f"still waiting for {os.path.basename(path)} (attempt {attempt})", flush=True)
            time.sleep(0.2)  # NFS attribute cache: the file will appear
    print(f"{os.path.basename(path)} never appeared; re-exporting it locally", flush=True)
    write_shard(dist.get_rank(), dist.get_world_size())
    return torch.load(path)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        export_job(world)
    dist.barrier()

    data = load_shard(shard_path(rank, world))
    torch.manual_seed(0)
    model = DDP(nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(6):
        xb = data[8 * step:8 * step + 8]
        loss = F.mse_loss(model(xb), xb[:, :1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
