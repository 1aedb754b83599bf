# Reconstructed from the review of https://github.com/Project-MONAI/monai-physio/pull/137
# (a batch whose loss is not finite is skipped on that rank alone: the other ranks enter
# backward's all-reduce and wait).
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train_epoch(model: DDP, optimizer, loader, loss_fn, log, epoch):
    model.train()
    for batch in loader:
        pred = model(batch["x"])
        loss = loss_fn(pred, batch["y"])
        if not torch.isfinite(loss):
            log.warning("epoch %d: non-finite loss; skipping this batch", epoch)
            continue
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
