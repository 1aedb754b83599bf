"""The fixed twin of accelerate_reentrant.py: the same accelerate DDP job on 2 CPU ranks, the
layer checkpointed twice with use_reentrant=False, which DDP supports: it trains clean.

Usage: torchrun --nproc-per-node 2 accelerate_reentrant_fixed.py.
"""

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.shared = nn.Linear(8, 8)  # applied twice: the weights are shared
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.embed(x)
        h = checkpoint(self.shared, h, use_reentrant=False)
        h = checkpoint(self.shared, torch.relu(h), use_reentrant=False)
        return self.head(h)


def main() -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = Shared()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for xb, yb in loader:
        loss = nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
    print(f"rank {accelerator.process_index}: trained")
    accelerator.end_training()


if __name__ == "__main__":
    main()
