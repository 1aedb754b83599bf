# Reconstructed from https://github.com/pytorch/pytorch/issues/134920
# (early stopping decided from each rank's own validation loss: one rank breaks out of the
# epoch loop while the others go on into the next epoch's gradient all-reduce).
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.best, self.count, self.early_stop = patience, None, 0, False

    def __call__(self, val_loss):
        if self.best is None or val_loss < self.best:
            self.best, self.count = val_loss, 0
        else:
            self.count += 1
            self.early_stop = self.count >= self.patience


def main(rank, world_size, train_loader, val_loader, epochs):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    model = DDP(nn.Linear(512, 512).to(rank), device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters())
    criterion = nn.MSELoss()
    early_stopping = EarlyStopping()
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for src, tgt in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(src.to(rank)), tgt.to(rank))
            loss.backward()
            optimizer.step()
        val_loss = 0.0
        with torch.no_grad():
            for src, tgt in val_loader:
                val_loss += criterion(model.module(src.to(rank)), tgt.to(rank)).item()
        if rank == 0:
            torch.save(model.module.state_dict(), f"model_epoch_{epoch + 1}.pth")
        early_stopping(val_loss)
        if early_stopping.early_stop:
            print("Early stopping")
            break
    dist.destroy_process_group()
