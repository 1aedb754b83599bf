# Sequence tagger trained with DDP; after each epoch every rank evaluates its own
# shard and a small MeanMetric all-reduces (sum, count).  Shards that contain
# padded sequences (label -100) are scored with sequence-level accuracy.
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

IGNORE = -100
TAGS = 4


class MeanMetric:
    def __init__(self):
        self.state = 0.0
        self.count = 0

    def update(self, value):
        self.state += value
        self.count += 1

    def compute(self):
        tensor = torch.tensor([self.state, self.count], dtype=torch.float64)  # same dtype on every rank
        dist.all_reduce(tensor)
        return (tensor[0] / tensor[1]).item()


def compute_acc(pred, labels):
    if (labels == IGNORE).any():
        # sequence-level accuracy: a sequence counts only if every real token is right
        mask = labels != IGNORE
        return np.all(((pred == labels) | ~mask).numpy(), axis=1).mean()
    return (pred == labels).float().mean().item()


def eval_shard(rank):
    g = torch.Generator().manual_seed(50 + rank)
    x = torch.randn(6, 5, 8, generator=g)
    labels = torch.randint(0, TAGS, (6, 5), generator=g)
    if rank == 2:  # rank 2's shard holds padded sequences
        labels[:, 3:] = IGNORE
    return x, labels


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, TAGS))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step in range(4):
            g = torch.Generator().manual_seed(rank * 10 + step)
            x = torch.randn(6, 5, 8, generator=g)
            y = torch.randint(0, TAGS, (6, 5), generator=g)
            loss = F.cross_entropy(model(x).reshape(-1, TAGS), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        metric = MeanMetric()
        x, labels = eval_shard(rank)
        with torch.no_grad():
            pred = model.module(x).argmax(-1)
        for i in range(0, 6, 2):
            metric.update(compute_acc(pred[i:i + 2], labels[i:i + 2]))
        acc = metric.compute()
        if rank == 0:
            print(f"epoch {epoch} eval acc {acc:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
