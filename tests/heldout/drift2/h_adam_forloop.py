"""Adam(foreach=False, amsgrad=True), three param groups with different lr, global grad clipping."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

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
        self.encoder = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 24))
        self.norm = nn.LayerNorm(24)
        self.head = nn.Linear(24, 1)

    def forward(self, x):
        return self.head(self.norm(self.encoder(x))).squeeze(-1)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = torch.optim.Adam(
        [
            {"params": model.encoder.parameters(), "lr": 1e-3},
            {"params": model.norm.parameters(), "lr": 5e-4},
            {"params": model.head.parameters(), "lr": 2e-3, "weight_decay": 1e-4},
        ],
        foreach=False,
        amsgrad=True,
    )
    gen = torch.Generator().manual_seed(7 + rank)
    for step in range(25):
        x = torch.randn(10, 12, generator=gen)
        y = x[:, :3].sum(dim=1)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
