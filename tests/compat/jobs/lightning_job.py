"""Lightning Trainer(strategy="ddp") on 2 CPU ranks, automatic then manual optimization.

Self-launched (``python lightning_job.py OUT``) or under torchrun.  Saves each model's
final parameters to OUT/rank{R}.pt.
"""

import os
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Auto(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Manual(Auto):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()


def data() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def fit(module: L.LightningModule) -> dict:
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, data())
    return {k: v.detach().clone() for k, v in module.state_dict().items()}, trainer


def main() -> None:
    out = sys.argv[1]
    auto, _ = fit(Auto())
    manual, trainer = fit(Manual())
    torch.save({"params": {"auto": auto, "manual": manual}, "checks": {}},
               os.path.join(out, f"rank{trainer.global_rank}.pt"))


if __name__ == "__main__":
    main()
