"""Lightning Trainer(strategy="ddp", accelerator="cpu", devices=2) launched by torchrun,
AdamW + StepLR from configure_optimizers, gradient clipping and accumulation by the Trainer."""
import hashlib

import lightning as L
import torch
import torch.distributed as dist
import torch.nn as nn
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


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=2e-3, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main():
    torch.set_num_threads(1)
    L.seed_everything(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 16, generator=gen)
    y = torch.randint(0, 4, (128,), generator=gen)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model = Classifier()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=2,
        accumulate_grad_batches=2,
        gradient_clip_val=1.0,
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
