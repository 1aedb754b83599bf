"""Lightning Trainer (ddp, cpu, 2 devices under torchrun): fine-tuning with a backbone that is held still
at first and released at epoch 2 by a callback."""
import hashlib

import lightning as L
import torch
import torch.distributed as dist
import torch.nn as nn
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

def check_replicas(module):
    named = list(module.named_parameters()) + list(module.named_buffers())
    digests = []
    for _, t in named:
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        digests.append(int.from_bytes(hashlib.sha256(raw).digest()[:7], "little"))
    mine = torch.tensor(digests, dtype=torch.int64)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    first = None
    for i, (name, _) in enumerate(named):
        if any(int(h[i]) != int(everyone[0][i]) for h in everyone):
            first = name
            break
    if dist.get_rank() == 0:
        print("REPLICAS identical" if first is None else f"REPLICAS differ: {first}", flush=True)
    dist.barrier()
    return first


class FineTuner(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(
            [{"params": self.backbone.parameters(), "lr": 0.0}, {"params": self.head.parameters()}], lr=1e-3
        )


class LrBackboneRelease(Callback):
    def __init__(self, release_at_epoch, backbone_lr):
        self.release_at_epoch = release_at_epoch
        self.backbone_lr = backbone_lr

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.release_at_epoch:
            trainer.optimizers[0].param_groups[0]["lr"] = self.backbone_lr


def main():
    torch.set_num_threads(1)
    L.seed_everything(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 16, generator=gen)
    y = torch.randint(0, 4, (128,), generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model = FineTuner()
    release = LrBackboneRelease(release_at_epoch=2, backbone_lr=1e-4)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=4,
        callbacks=[release],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
