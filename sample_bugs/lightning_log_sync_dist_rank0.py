#!/usr/bin/env python
"""Lightning: `self.log(..., sync_dist=True)` on one rank hangs at the end of the epoch.

Only rank 0 logs the gradient norm it measured (`if self.global_rank == 0:`), with
`sync_dist=True` so the logged value is averaged over the ranks. Lightning does not reduce it
where `self.log` is called: it queues the value and all-reduces it when the epoch's metrics
are computed, inside `trainer.fit`. Rank 0 waits there in an all-reduce rank 1 never calls;
rank 1 waits in the next epoch's gradient all-reduce. No line of the user's shows the
collective: the `self.log` line and the metric's key are what to look for.
Source: Lightning-AI/pytorch-lightning#18150 and #19604 (self.log(sync_dist=True) under a
rank test hangs); Lightning's docs ("sync_dist ... must be called on all processes").
Run: torchrun --nproc-per-node 2 lightning_log_sync_dist_rank0.py
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
        if self.global_rank == 0:
            norm = torch.cat([p.grad.flatten() for p in self.parameters()]).norm()
            # BUG: a synced metric logged on one rank only
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
