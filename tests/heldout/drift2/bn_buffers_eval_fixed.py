"""A BatchNorm classifier trained with DDP(broadcast_buffers=False) (as in detection codebases),
then evaluated on the same validation set on every rank."""
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
        self.fc1 = nn.Linear(12, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model, broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(400 + rank)
    for step in range(20):
        x = torch.randn(16, 12, generator=gen) * (1.0 + rank) + rank
        y = torch.randint(0, 3, (16,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        for name, buf in model.named_buffers():
            if buf.is_floating_point():
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
                buf.div_(dist.get_world_size())
        opt.step()
    val_gen = torch.Generator().manual_seed(999)
    xv = torch.randn(64, 12, generator=val_gen)
    yv = torch.randint(0, 3, (64,), generator=val_gen)
    model.eval()
    with torch.no_grad():
        val_loss = nn.functional.cross_entropy(model(xv), yv).item()
    print(f"rank {rank} val_loss {val_loss:.6f}", flush=True)
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
