"""A home-made optimizer (sign-momentum, Lion-like, with decoupled decay and a step counter)."""
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


class SignMomentum(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, beta1=0.9, beta2=0.99, decay=0.0):
        super().__init__(params, dict(lr=lr, beta1=beta1, beta2=beta2, decay=decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["t"] = 0
                state["t"] += 1
                m = state["m"]
                update = (group["beta1"] * m + (1 - group["beta1"]) * p.grad).sign()
                p.mul_(1 - group["lr"] * group["decay"])
                p.add_(update, alpha=-group["lr"])
                m.mul_(group["beta2"]).add_(p.grad, alpha=1 - group["beta2"])
        return None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = SignMomentum(
        [{"params": model.encoder.parameters()}, {"params": model.head.parameters(), "lr": 3e-4}],
        lr=1e-3,
        decay=0.1,
    )
    gen = torch.Generator().manual_seed(61 + rank)
    for step in range(25):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 3, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
