"""DDP(broadcast_buffers=False) with buffers that never differ between ranks
(a constant positional table and a forward counter advanced identically everywhere), no BatchNorm."""
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
        self.register_buffer("pos", torch.linspace(-1.0, 1.0, 16).unsqueeze(0))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.mix = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        if self.training:
            self.calls += 1
        return self.head(self.norm(torch.relu(self.mix(x + self.pos))))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, broadcast_buffers=False)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.5)
    gen = torch.Generator().manual_seed(21 + rank)
    for step in range(25):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 2, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        probe = model(torch.ones(1, 16)).sum().item()
    print(f"rank {rank} eval probe {probe:.6f} calls {int(model.calls)}", flush=True)
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
