"""Each rank resumes from its own trainer-state file; rank 1's is missing (a node that was
replaced), so it starts at step 0 while rank 0 starts at step 6: rank 0 finishes its 4
steps and exits, rank 1 waits in step 4's all-reduce.  FIXED=1: rank 0 reads the step and
broadcasts it."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 10


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = os.environ.get("OUT", "/tmp")
    state_path = os.path.join(out, f"trainer_state_rank{rank}.txt")
    if rank == 0:
        with open(state_path, "w") as f:
            f.write("6")
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if os.path.exists(state_path):
        start_step = int(open(state_path).read())
    else:
        start_step = 0
    if os.environ.get("FIXED") == "1":
        agreed = torch.tensor([start_step])
        dist.broadcast(agreed, src=0)
        start_step = int(agreed)
    for step in range(start_step, STEPS):
        loss = model(torch.randn(8, 4)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
