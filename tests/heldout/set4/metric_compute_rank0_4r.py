# Classifier trained with DDP; a torchmetrics-style Accuracy object accumulates
# per-rank counts and syncs them across ranks inside compute().  The epoch-end
# report is printed by the main process only.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class SyncedAccuracy:
    def __init__(self):
        self.correct = torch.zeros(1)
        self.total = torch.zeros(1)

    def update(self, logits, target):
        self.correct += (logits.argmax(-1) == target).sum()
        self.total += target.numel()

    def compute(self):
        stats = torch.cat([self.correct, self.total])
        gathered = [torch.zeros_like(stats) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, stats)  # dist_sync_on_compute
        stats = torch.stack(gathered).sum(0)
        return (stats[0] / stats[1]).item()

    def reset(self):
        self.correct.zero_()
        self.total.zero_()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 3)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    acc = SyncedAccuracy()
    for epoch in range(3):
        for step in range(5):
            g = torch.Generator().manual_seed(epoch * 1000 + rank * 10 + step)
            x = torch.randn(16, 6, generator=g)
            y = x[:, :3].argmax(-1)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            acc.update(logits.detach(), y)
        if rank == 0:
            print(f"epoch {epoch}: train acc {acc.compute():.3f}", flush=True)
        acc.reset()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
