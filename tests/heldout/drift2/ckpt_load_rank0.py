"""Fine-tuning from a pretrained encoder checkpoint (written once, then read back) under DDP."""
import hashlib
import os
import tempfile

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
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt_path = os.path.join(tempfile.gettempdir(), f"drift2_encoder_{os.environ.get('MASTER_PORT', '0')}.pt")
    if rank == 0:
        torch.manual_seed(123)
        torch.save(Net().encoder.state_dict(), ckpt_path)
    dist.barrier()

    torch.manual_seed(0)
    model = Net()
    ddp = DDP(model)
    if rank == 0:
        model.encoder.load_state_dict(torch.load(ckpt_path, map_location="cpu"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(200 + rank)
    for step in range(15):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randint(0, 4, (8,), generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} loss {loss.item():.4f}", flush=True)
    check_replicas(model)
    if rank == 0:
        os.remove(ckpt_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
