# Each node keeps a preprocessed-feature cache on local scratch, guarded by a lock
# file that a cache writer holds while it rebuilds the cache.  Readers wait for
# the lock to disappear.  The previous job was killed on node 2 mid-rebuild.
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])


def cache_dir(rank):
    return os.path.join(WORK, f"node{rank}", "feature_cache")


def leftovers_from_previous_job(rank):
    if rank == 0:
        shutil.rmtree(WORK, ignore_errors=True)
    dist.barrier()
    d = cache_dir(rank)
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(rank)
    torch.save(torch.randn(64, 16, generator=g), os.path.join(d, "features.pt"))
    if rank == 2:  # killed while rebuilding: its lock file was never removed
        with open(os.path.join(d, "cache.lock"), "w") as f:
            f.write("pid=4194000\n")
    dist.barrier()


def read_cache(d):
    lock = os.path.join(d, "cache.lock")
    while os.path.exists(lock):  # a writer is rebuilding the cache; wait for it
        with open(lock) as f:
            pid = int(f.read().strip().split("=")[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:  # the writer is gone: the lock is stale
            os.remove(lock)
            break
        time.sleep(0.5)
    return torch.load(os.path.join(d, "features.pt"))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    leftovers_from_previous_job(rank)

    feats = read_cache(cache_dir(rank))
    targets = feats[:, :2].sum(1, keepdim=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(8):
        idx = slice(8 * step, 8 * step + 8)
        loss = F.mse_loss(model(feats[idx]), targets[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("trained on cached features", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
