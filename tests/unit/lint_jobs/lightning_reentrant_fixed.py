"""The fixed twin of lightning_reentrant.py: the same Lightning DDP job on 2 CPU ranks, the layer
checkpointed twice with use_reentrant=False, which DDP supports: it trains clean.

Self-launched (``python lightning_reentrant_fixed.py``) or under ``torchrun --nproc-per-node 2``.
"""

import lightning as L
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Shared(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(8, 8)
        self.shared = nn.Linear(8, 8)  # applied twice: the weights are shared
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.embed(x)
        h = checkpoint(self.shared, h, use_reentrant=False)
        h = checkpoint(self.shared, torch.relu(h), use_reentrant=False)
        return self.head(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def main() -> None:
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Shared(), data())
    print(f"rank {trainer.global_rank}: trained")


if __name__ == "__main__":
    main()
