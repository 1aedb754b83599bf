"""AMP (bfloat16 autocast + GradScaler("cpu")) with DDP; the first epoch has uneven inputs per rank and is
wrapped in Join, the second epoch is even."""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
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
        self.encoder = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.encoder(x)).squeeze(-1)


def train_step(ddp, opt, scaler, x):
    y = x[:, :3].sum(dim=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ddp(x)
    loss = nn.functional.mse_loss(out.float(), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    gen = torch.Generator().manual_seed(600 + rank)
    steps = 0
    epoch0 = [torch.randn(8, 10, generator=gen) for _ in range(6 if rank == 0 else 4)]
    with Join([ddp]):
        for x in epoch0:
            train_step(ddp, opt, scaler, x)
            steps += 1
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, steps)
    state = [scaler.state_dict()]
    dist.broadcast_object_list(state, src=counts.index(max(counts)))
    scaler.load_state_dict(state[0])
    epoch1 = [torch.randn(8, 10, generator=gen) for _ in range(5)]
    for x in epoch1:
        loss = train_step(ddp, opt, scaler, x)
        steps += 1
    print(f"rank {rank} steps {steps} scale {scaler.get_scale()} loss {loss.item():.4f}", flush=True)
    check_replicas(model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
