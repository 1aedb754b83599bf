#!/usr/bin/env python
"""Fixed: rank 0 releases the file lock before it waits in the barrier.

Run: torchrun --nproc-per-node 2 lock_held_across_barrier_fixed.py
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
            fcntl.flock(lock, fcntl.LOCK_UN)  # FIX: release the lock, then wait
            dist.barrier()
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
