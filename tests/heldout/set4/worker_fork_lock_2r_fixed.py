# Dataset with an in-process decoded-sample cache guarded by a lock.  The rank
# chosen as PROFILE_RANK also runs a background uploader thread that snapshots
# the cache (holding the lock) while the DataLoader workers are being forked.
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

PROFILE_RANK = 1
_cache = {}
_cache_lock = threading.Lock()


class CachedDecode(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        with _cache_lock:
            if i not in _cache:
                g = torch.Generator().manual_seed(i)
                _cache[i] = torch.randn(10, generator=g)
            x = _cache[i]
        return x, int(x.sum() > 0)


def cache_uploader(started):
    with _cache_lock:  # snapshot the cache for the profiler upload
        started.set()
        snapshot = dict(_cache)
        time.sleep(120.0)  # slow upload of the snapshot
    return snapshot


def fresh_lock_in_worker(worker_id):
    global _cache_lock
    _cache_lock = threading.Lock()  # a forked worker must not inherit a lock another thread holds


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == PROFILE_RANK:
        started = threading.Event()
        threading.Thread(target=cache_uploader, args=(started,), daemon=True).start()
        started.wait()

    ds = CachedDecode()
    loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds), num_workers=2,
                        multiprocessing_context="fork", worker_init_fn=fresh_lock_in_worker)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("epoch done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
