# Reconstructed from https://github.com/Lightning-AI/pytorch-lightning/issues/19045
# (the monitored metric is logged with rank_zero_only=True: ModelCheckpoint's ranks disagree
# on the best checkpoint and the job hangs).
import lightning.pytorch as pl
import torch
import torch.nn as nn
from lightning.pytorch.callbacks import ModelCheckpoint


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).sum()

    def validation_step(self, batch, batch_idx):
        loss = self.layer(batch).sum()
        self.log("val_loss", loss, rank_zero_only=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2)
    trainer = pl.Trainer(strategy="ddp", devices=2, callbacks=[checkpoint], max_epochs=5)
    trainer.fit(Model())
