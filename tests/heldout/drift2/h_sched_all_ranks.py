"""Warmup + cosine LambdaLR stepped every iteration on every rank, per-group lr multipliers."""
import hashlib
import math

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
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.backbone(x))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = torch.optim.AdamW(
        [{"params": model.backbone.parameters(), "lr": 5e-4}, {"params": model.head.parameters(), "lr": 2e-3}],
        weight_decay=0.02,
    )
    total, warmup = 30, 5

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    gen = torch.Generator().manual_seed(17 + rank)
    for step in range(total):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 4, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    if rank == 0:
        print(f"final lrs {[round(g['lr'], 8) for g in opt.param_groups]}")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
