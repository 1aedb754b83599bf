"""Torch.distributed.optim.ZeroRedundancyOptimizer (AdamW shards) under DDP, with a StepLR on every rank."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
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
        self.embed = nn.Linear(16, 48)
        self.block1 = nn.Sequential(nn.Linear(48, 48), nn.ReLU())
        self.block2 = nn.Sequential(nn.Linear(48, 48), nn.ReLU())
        self.head = nn.Linear(48, 5)

    def forward(self, x):
        return self.head(self.block2(self.block1(self.embed(x))))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=8, gamma=0.5)
    gen = torch.Generator().manual_seed(55 + rank)
    for step in range(24):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 5, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        sd = opt.state_dict()
        print(f"final loss {loss.item():.4f}; consolidated state for {len(sd['state'])} params")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
