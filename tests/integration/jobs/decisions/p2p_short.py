"""The last micro-batch is short: the receiver sizes its buffer for it, the sender pads
every send to the full micro-batch; gloo aborts the receiver on the size.  FIXED=1: the
sender sends the short last micro-batch as it is."""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    n, size = 10, 4
    for start in range(0, n, size):
        rows = min(size, n - start)
        if rank == 0:
            out = torch.ones(rows if os.environ.get("FIXED") == "1" else size)
            dist.send(out, dst=1)
        else:
            buf = torch.empty(rows)
            dist.recv(buf, src=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
