# Two kinds of workers share one DDP model: even ranks train on labelled data,
# odd ranks on pseudo-labelled data that needs a confidence threshold agreed
# across ranks.  The branches look different but issue the same collectives in
# the same order (one all_reduce, then the DDP backward).
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def labelled_step(model, rank, step):
    g = torch.Generator().manual_seed(rank * 100 + step)
    x = torch.randn(16, 8, generator=g)
    y = (x[:, 0] > 0).long()
    n = torch.tensor([float(len(y))])
    dist.all_reduce(n)  # global sample count, for logging
    return F.cross_entropy(model(x), y)


def pseudo_labelled_step(model, rank, step):
    g = torch.Generator().manual_seed(rank * 100 + step)
    x = torch.randn(16, 8, generator=g)
    with torch.no_grad():
        probs = model.module(x).softmax(-1)
    conf = probs.max(-1).values.mean().reshape(1)
    dist.all_reduce(conf)  # shared confidence threshold
    keep = probs.max(-1).values >= 0.9 * conf / dist.get_world_size()
    return F.cross_entropy(model(x), probs.argmax(-1)) * keep.float().mean()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(8):
        if rank % 2 == 0:
            loss = labelled_step(model, rank, step)
        else:
            loss = pseudo_labelled_step(model, rank, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
