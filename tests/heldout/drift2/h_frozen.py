"""A frozen embedding (requires_grad=False before DDP) and a trained head; SGD with nesterov."""
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
        self.embedding = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)
        self.classifier = nn.Linear(16, 3)

    def forward(self, tokens):
        h = self.embedding(tokens).mean(dim=1)
        return self.classifier(torch.relu(self.proj(h)))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    model.embedding.weight.requires_grad_(False)
    ddp = DDP(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1, momentum=0.9, nesterov=True)
    gen = torch.Generator().manual_seed(40 + rank)
    for step in range(25):
        tokens = torch.randint(0, 50, (8, 6), generator=gen)
        y = torch.randint(0, 3, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(tokens), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
