# Training script with an accelerate-style state checkpointer.  save_state()
# writes the model/optimizer from the main process and every rank's RNG state,
# then waits for all processes.  The script guards saving with is_main_process.
import os
import shutil

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

WORK = os.path.join("/tmp/set4_work", os.path.splitext(os.path.basename(__file__))[0])


class StateCheckpointer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def save_state(self, out_dir):
        rank = dist.get_rank()
        os.makedirs(out_dir, exist_ok=True)
        if rank == 0:
            torch.save({"model": self.model.module.state_dict(), "optim": self.optimizer.state_dict()},
                       os.path.join(out_dir, "state.pt"))
        torch.save(torch.get_rng_state(), os.path.join(out_dir, f"rng_{rank}.pt"))
        dist.barrier()  # wait_for_everyone(): the checkpoint is complete only when all ranks wrote


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    is_main_process = rank == 0
    if is_main_process:
        shutil.rmtree(WORK, ignore_errors=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = StateCheckpointer(model, opt)

    for epoch in range(3):
        for step in range(4):
            g = torch.Generator().manual_seed(epoch * 100 + rank * 10 + step)
            x = torch.randn(8, 16, generator=g)
            loss = F.mse_loss(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if is_main_process:
            ckpt.save_state(os.path.join(WORK, f"epoch_{epoch}"))
            print(f"saved epoch {epoch}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
