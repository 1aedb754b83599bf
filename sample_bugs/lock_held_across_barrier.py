#!/usr/bin/env python
"""A file lock held across a barrier: rank 0 waits for rank 1, rank 1 waits for the lock.

Rank 0 prepares a shared cache under a file lock and, still holding it, waits in a barrier
for the others to be ready. The others take the same lock first, to read the cache only once
it is complete. Rank 1 is blocked in flock (no CPU, outside any collective), rank 0 in the
barrier: neither returns.
Source: modelscope/mcore-bridge#47 (safe_ddp_context: a barrier inside a file-locked
section hangs); pmodels/mpich#1997 (an exclusive lock held across MPI_Barrier, the same
shape in MPI).
Run: torchrun --nproc-per-node 2 lock_held_across_barrier.py
"""
import datetime
import fcntl
import os
import tempfile
import time

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    cache = os.path.join(tempfile.gettempdir(), f"cache-{os.environ['MASTER_PORT']}.pt")
    dist.barrier()  # every rank has opened the group before rank 0 takes the lock
    with open(cache + ".lock", "w") as lock:
        if rank == 0:
            fcntl.flock(lock, fcntl.LOCK_EX)
            torch.save(torch.arange(8.0), cache)
            dist.barrier()  # BUG: waits for the others while it holds the lock
            fcntl.flock(lock, fcntl.LOCK_UN)
        else:
            time.sleep(0.5)  # rank 0 is first to the lock
            fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the cache to be complete
            fcntl.flock(lock, fcntl.LOCK_UN)
            dist.barrier()
    data = torch.load(cache)
    dist.all_reduce(data)
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    if rank == 0:
        os.remove(cache)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
