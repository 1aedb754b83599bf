# DDP regression with an early-stopping callback.  Each rank validates on its own
# validation shard and feeds that local loss to its EarlyStopping instance.
# Rank 1's validation shard came from a mislabeled batch of the dataset.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

EPOCHS = 6


class EarlyStopping:
    def __init__(self, patience=2, min_delta=1e-3):
        self.patience, self.min_delta = patience, min_delta
        self.best, self.bad_epochs = float("inf"), 0

    def step(self, metric):
        if metric < self.best - self.min_delta:
            self.best, self.bad_epochs = metric, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience


def batch(seed, mislabeled=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)
    if mislabeled:
        y = torch.randn(64, 1, generator=g) * 3
    return x, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    stopper = EarlyStopping()
    val_x, val_y = batch(900 + rank, mislabeled=(rank == 1))

    for epoch in range(EPOCHS):
        for step in range(4):
            x, y = batch(rank * 100 + epoch * 10 + step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val_loss = F.mse_loss(model.module(val_x), val_y).item()
        print(f"[rank {rank}] epoch {epoch} val_loss {val_loss:.4f}", flush=True)
        if stopper.step(val_loss):
            print(f"[rank {rank}] early stopping at epoch {epoch}", flush=True)
            break

    dist.barrier()  # wait for everyone before saving the final model
    if rank == 0:
        torch.save(model.module.state_dict(), "/tmp/set4_early_stop_final.pt")
        print("saved final model", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
