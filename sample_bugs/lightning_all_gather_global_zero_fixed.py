#!/usr/bin/env python
"""Fixed twin: every rank calls `self.all_gather`; only the print stays on rank 0.

At the end of each training epoch, rank 0 gathers the epoch's losses to print their mean,
but only rank 0 calls all_gather: rank 1 goes on into the next epoch and waits in its first
gradient all-reduce.  Lightning's own docs warn that all_gather must run on every process.
Source: Lightning-AI/pytorch-lightning#16541 (all_gather under is_global_zero hangs
forever) and #20683.
Run: torchrun --nproc-per-node 2 lightning_all_gather_global_zero_fixed.py
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
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.detach())
        return loss

    def on_train_epoch_end(self) -> None:
        gathered = self.all_gather(torch.stack(self.losses).mean())  # FIX: on every rank
        if self.trainer.is_global_zero:
            print(f"epoch {self.current_epoch}: mean loss {gathered.mean():.4f}", flush=True)
        self.losses.clear()

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
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
