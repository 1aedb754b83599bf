"""DDP steps with a user's all_reduce after each; rank 1 takes one step fewer and waits in a
barrier while rank 0 is left in the gradient all-reduce of its last step (bucket 0).

STEPS (env, 30): rank 0's steps.  Three buckets a pass (bucket_cap_mb is small)."""
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                              nn.Linear(64, 2)), bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    steps = int(os.environ.get("STEPS", "30")) - (1 if rank == 1 else 0)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # the backward line
        opt.step()
        dist.all_reduce(loss.detach())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
