#!/usr/bin/env python
"""An auxiliary loss taken only when the batch holds the rare class: one rank skips it once.

The model has an auxiliary head whose loss is added only when the batch contains a sample of
class 2. DDP (find_unused_parameters=False) waits for a gradient of every parameter before it
reduces the bucket that holds it. In iteration 3, rank 1's batch has no class-2 sample: its
`aux` head gets no gradient, its bucket is never reduced, rank 0 waits in that all-reduce, and
rank 1's next forward raises "Expected to have finished reduction in the prior iteration ...
Parameter indices which did not receive grad for rank 1: 4 5".
Source: pytorch/pytorch#43259 (branches in the forward); open-mmlab/mmdetection#4742 (FAQ:
"caused by running different branches in your code in DDP mode").
Run: torchrun --nproc-per-node 2 aux_loss_skipped_one_rank.py
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class WithAux(nn.Module):
    """A classifier with an auxiliary head for the rare class."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)
        self.aux = nn.Linear(16, 1)

    def forward(self, x, rare):
        h = torch.relu(self.body(x))
        out = self.head(h)
        if rare.any():  # decided per rank, on its own batch
            return out, self.aux(h[rare]).mean()
        return out, None


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    model = DDP(WithAux())  # BUG: the aux head is skipped on some batches of some ranks
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for it in range(6):
        x = torch.randn(4, 8, generator=g)
        y = torch.tensor([0, 1, 2, 0]) if not (rank == 1 and it == 3) else \
            torch.tensor([0, 1, 1, 0])  # rank 1's batch 3 has no sample of class 2
        opt.zero_grad()
        out, aux = model(x, y == 2)
        loss = nn.functional.cross_entropy(out, y)
        if aux is not None:
            loss = loss + 0.1 * aux
        loss.backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
