# Rank 0 also runs a local, non-distributed evaluation over its extra held-out
# batches after each epoch: its loop runs more iterations than the other rank's,
# but the evaluation uses the unwrapped module and issues no collectives.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HELDOUT_BATCHES = {0: 7, 1: 2}  # rank 0 owns the bigger held-out split


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for step in range(4):
            g = torch.Generator().manual_seed(epoch * 100 + rank * 10 + step)
            x = torch.randn(12, 10, generator=g)
            y = x[:, :3].argmax(-1)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for b in range(HELDOUT_BATCHES[rank]):
                g = torch.Generator().manual_seed(5000 + rank * 100 + b)
                x = torch.randn(64, 10, generator=g)
                correct += (model.module(x).argmax(-1) == x[:, :3].argmax(-1)).sum().item()
                total += 64
        model.train()
        print(f"[rank {rank}] epoch {epoch} local heldout acc {correct / total:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
