# After each epoch rank 0 uploads the checkpoint to remote storage (about 5 s),
# while the other ranks wait at a barrier; then training continues.
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])


def upload(local_path, remote_dir):
    os.makedirs(remote_dir, exist_ok=True)
    time.sleep(5.0)  # slow link to the object store
    shutil.copy(local_path, remote_dir)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for step in range(4):
            g = torch.Generator().manual_seed(epoch * 100 + rank * 10 + step)
            x = torch.randn(16, 8, generator=g)
            loss = F.mse_loss(model(x), x.mean(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            path = os.path.join(WORK, f"epoch{epoch}.pt")
            torch.save(model.module.state_dict(), path)
            upload(path, os.path.join(WORK, "remote"))
            print(f"uploaded epoch {epoch}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
