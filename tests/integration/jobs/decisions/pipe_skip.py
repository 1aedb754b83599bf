"""A two-stage pipeline whose first stage skips an empty micro-batch: it sends 3 of the 4
activations, the second stage waits for a 4th.  FIXED=1: the empty micro-batch is sent
too (the receiver drops it)."""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fixed = os.environ.get("FIXED") == "1"
    micro = [torch.ones(4) * i for i in range(4)]  # micro-batch 0 is all zeros
    for mb in micro:
        if rank == 0:
            if mb.sum() == 0 and not fixed:
                continue
            dist.send(mb, dst=1)
        else:
            buf = torch.empty(4)
            dist.recv(buf, src=0)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
