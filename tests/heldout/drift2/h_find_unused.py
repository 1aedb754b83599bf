"""Find_unused_parameters=True; an auxiliary branch is used only on some ranks at some steps,
and a second head only on even steps (same on all ranks)."""
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
        self.trunk = nn.Sequential(nn.Linear(8, 24), nn.ReLU())
        self.aux = nn.Linear(24, 24)
        self.head_a = nn.Linear(24, 2)
        self.head_b = nn.Linear(24, 2)

    def forward(self, x, use_aux, even):
        h = self.trunk(x)
        if use_aux:
            h = h + torch.tanh(self.aux(h))
        return self.head_a(h) if even else self.head_b(h)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(70 + rank)
    for step in range(24):
        x = torch.randn(8, 8, generator=gen)
        y = torch.randint(0, 2, (8,), generator=gen)
        out = ddp(x, use_aux=(step + rank) % 3 == 0, even=step % 2 == 0)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
