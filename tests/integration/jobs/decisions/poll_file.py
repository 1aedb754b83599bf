"""Rank 1 polls for a file rank 0 was to write before the next all-reduce, but rank 0 never
writes it (its branch only logs): rank 1 loops, rank 0 waits.  FIXED=1: rank 0 writes the
file after WRITE_S seconds (a slow but finite wait, within the bound)."""
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    flag = os.path.join(os.environ.get("OUT", "/tmp"), "ready.flag")
    t = torch.ones(1)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == 0:
        print("rank 0: preparing the shared cache", flush=True)
        if os.environ.get("FIXED") == "1":
            time.sleep(float(os.environ.get("WRITE_S", "3")))
            open(flag, "w").close()
    else:
        while not os.path.exists(flag):
            time.sleep(0.05)
    dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
