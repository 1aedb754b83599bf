"""accelerate under torchrun on 2 CPU ranks, with gradient accumulation (no_sync inside).

Usage: torchrun --nproc-per-node 2 accelerate_job.py OUT; saves OUT/rank{R}.pt.
"""

import os
import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    out = sys.argv[1]
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
    accelerator.wait_for_everyone()
    params = {k: v.detach().clone()
              for k, v in accelerator.unwrap_model(model).state_dict().items()}
    torch.save({"params": {"accumulate": params}, "checks": {}},
               os.path.join(out, f"rank{accelerator.process_index}.pt"))
    accelerator.end_training()


if __name__ == "__main__":
    main()
