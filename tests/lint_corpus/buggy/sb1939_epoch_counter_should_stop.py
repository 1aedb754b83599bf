# Reconstructed from https://github.com/speechbrain/speechbrain/issues/1939
# (an epoch counter with a stopper fed each rank's own validation loss: the ranks stop at
# different epochs, and the ones left wait in the gradient all-reduce until the NCCL timeout).
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(modules, optimizer, epoch_counter, train_loader, valid_loader, rank):
    model = DDP(modules, device_ids=[rank])
    for epoch in epoch_counter:
        model.train()
        for batch in train_loader:
            loss = model(batch).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        avg_valid_loss = 0.0
        with torch.no_grad():
            for batch in valid_loader:
                avg_valid_loss += model(batch).mean().item()
        avg_valid_loss /= len(valid_loader)
        if epoch_counter.should_stop(current=epoch, current_metric=avg_valid_loss):
            break
