#!/usr/bin/env python
"""The fixed twin of lightning_log_sync_dist_rank0.py: every rank logs the synced metric.

`self.log(..., sync_dist=True)` queues an all-reduce that Lightning runs at the end of the
epoch, so every rank logs it; only what rank 0 alone does (a print) may stay under the test.
Run: torchrun --nproc-per-node 2 lightning_log_sync_dist_rank0_fixed.py
"""
import datetime
import os

import lightning as L
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, sync_dist=True)
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        norm = torch.cat([p.grad.flatten() for p in self.parameters()]).norm()
        # FIX: every rank logs the synced metric (Lightning reduces it on every rank)
        self.log("grad_norm", norm, on_step=False, on_epoch=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starts", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    x = torch.randn(32, 8)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=3,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Model(), loader)


if __name__ == "__main__":
    main()
