"""Lightning Fabric (strategy="ddp") on 2 CPU ranks under torchrun: a few steps with an LR
scheduler, then each rank saves its final parameters to OUT/rank{R}.pt.
Usage: torchrun --nproc-per-node 2 fabric_job.py OUT
"""

import os
import sys

import torch
from lightning.fabric import Fabric
from torch import nn


def main() -> None:
    out = sys.argv[1]
    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, opt = fabric.setup(model, opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    g = torch.Generator().manual_seed(fabric.global_rank)
    for _ in range(5):
        fabric.backward(model(torch.randn(4, 8, generator=g)).square().mean())
        opt.step()
        opt.zero_grad()
        sched.step()
    fabric.barrier()
    params = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    torch.save({"params": {"fabric": params}}, os.path.join(out, f"rank{fabric.global_rank}.pt"))


if __name__ == "__main__":
    main()
