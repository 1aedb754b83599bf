# Preemptible job that resumes from a checkpoint kept on node-local scratch.
# After a preemption only node 0's scratch still holds "last.pt".
import os
import shutil

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])
TOTAL_STEPS = 10


def node_scratch(rank):
    # one rank per "node" in this small job
    return os.path.join(WORK, f"node{rank}", "scratch")


def simulate_previous_run(rank, model):
    if rank == 0:
        shutil.rmtree(WORK, ignore_errors=True)
    dist.barrier()
    os.makedirs(node_scratch(rank), exist_ok=True)
    if rank == 0:  # only node 0 survived the preemption with its scratch intact
        torch.save({"step": 6, "model": model.state_dict()}, os.path.join(node_scratch(0), "last.pt"))
    dist.barrier()


def maybe_resume(ddp_model, scratch):
    path = os.path.join(scratch, "last.pt")
    if not os.path.exists(path):
        return 0
    ckpt = torch.load(path)
    ddp_model.module.load_state_dict(ckpt["model"])
    step = torch.tensor([ckpt["step"]])
    dist.all_reduce(step, op=dist.ReduceOp.MIN)  # agree on the step to resume from
    return int(step.item())


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 4))
    simulate_previous_run(rank, net)

    model = DDP(net)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = maybe_resume(model, node_scratch(rank))
    print(f"[rank {rank}] starting at step {start}", flush=True)

    for step in range(start, TOTAL_STEPS):
        g = torch.Generator().manual_seed(rank * 100 + step)
        x = torch.randn(32, 20, generator=g)
        y = torch.randint(0, 4, (32,), generator=g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
