"""A forward that returns early on an empty batch: each rank slices its batches from its
own shard, rank 1's is shorter, so its last batch is empty; its model skips the head and
returns zeros, its backward reaches no gradient of the head, and DDP's all-reduce of the
step never comes on rank 1.  FIXED=1: the empty batch still runs the head (on zero rows)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.body(x)
        if x.shape[0] == 0 and os.environ.get("FIXED") != "1":
            return h.sum(dim=1, keepdim=True) * 0
        return self.head(h)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = torch.randn(56, 4)
    shard = data[rank * 32:(rank + 1) * 32]  # 32 rows, and 24 on the last rank
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        x = shard[step * 8:(step + 1) * 8]
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
