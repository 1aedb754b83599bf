"""Lightning Fabric(strategy="ddp", accelerator="cpu", devices=2) under torchrun, with
fabric.no_backward_sync gradient accumulation and fabric.clip_gradients."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from lightning.fabric import Fabric
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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.encoder(x)).squeeze(-1)


def main():
    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    fabric.seed_everything(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, opt = fabric.setup(model, opt)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 12, generator=gen)
    y = x[:, :4].sum(dim=1)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True))
    accum = 2
    for epoch in range(2):
        for i, (xb, yb) in enumerate(loader):
            is_accumulating = (i + 1) % accum != 0
            with fabric.no_backward_sync(model, enabled=is_accumulating):
                loss = nn.functional.mse_loss(model(xb), yb) / accum
                fabric.backward(loss)
            if not is_accumulating:
                fabric.clip_gradients(model, opt, max_norm=1.0)
                opt.step()
                opt.zero_grad()
    fabric.print(f"final loss {loss.item():.4f}")
    check_replicas(model.module)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
