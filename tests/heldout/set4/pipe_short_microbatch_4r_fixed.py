# Two-stage pipeline x two data-parallel replicas (PP=2, DP=2).  Stage 0 runs the
# encoder and sends activations to stage 1, which runs the head and the loss and
# sends the activation gradient back.  Each stage is DDP-wrapped over its DP group.
# Replica A's shard holds 30 samples, so its last micro-batch has 6 rows, not 8.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MICRO = 8
HIDDEN = 32
SHARD_SIZES = {0: 30, 1: 32}  # replica -> samples in its shard


def shard(replica):
    g = torch.Generator().manual_seed(replica)
    x = torch.randn(SHARD_SIZES[replica], 16, generator=g)
    y = (x[:, 0] > 0).long()
    return x, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stage, replica = rank % 2, rank // 2
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    torch.manual_seed(stage)
    if stage == 0:
        net = DDP(nn.Sequential(nn.Linear(16, HIDDEN), nn.ReLU()), process_group=dp_groups[0])
    else:
        net = DDP(nn.Linear(HIDDEN, 2), process_group=dp_groups[1])
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    peer = rank + 1 if stage == 0 else rank - 1

    x, y = shard(replica)
    n_micro = (len(x) + MICRO - 1) // MICRO
    for epoch in range(2):
        for m in range(n_micro):
            xb, yb = x[m * MICRO:(m + 1) * MICRO], y[m * MICRO:(m + 1) * MICRO]
            opt.zero_grad()
            if stage == 0:
                act = net(xb)
                dist.send(torch.tensor(act.shape), dst=peer)  # tell stage 1 the micro-batch shape
                dist.send(act.detach(), dst=peer)
                grad = torch.empty_like(act)
                dist.recv(grad, src=peer)
                act.backward(grad)
            else:
                shape = torch.empty(2, dtype=torch.long)
                dist.recv(shape, src=peer)
                act = torch.empty(*shape.tolist())
                dist.recv(act, src=peer)
                act.requires_grad_()
                loss = F.cross_entropy(net(act), yb)
                loss.backward()
                dist.send(act.grad, dst=peer)
            opt.step()
        if rank == 1:
            print(f"epoch {epoch} last loss {loss.item():.4f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
