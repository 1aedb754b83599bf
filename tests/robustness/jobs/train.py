"""A small deterministic DDP job whose trouble is chosen by MODE=<name> in the environment.

MODE: train (healthy; default), kill_in_collective (rank 0 SIGKILLs rank 1 while rank 1
waits inside an all_reduce), sigstop (rank 1 SIGSTOPs itself; rank 0 waits), fill_disk
(after STEPS//2 steps rank 0 fills FILL_PATH's file system, then training goes on),
long (trains until SECONDS have passed), exit_code (rank 1 exits with status 3 at the
end).  STEPS (default 12), STEP_SLEEP (seconds, 0),
OUT_DIR (parameters saved there as params-rank<r>.npy).  Every line the job prints itself
starts with "JOB|".
"""

import datetime
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

MODE = os.environ.get("MODE", "train")
STEPS = int(os.environ.get("STEPS", "12"))
STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0"))


def say(text: str, err: bool = False) -> None:
    """One write(2) a line, so that the ranks' lines never interleave mid-line."""
    os.write(2 if err else 1, f"JOB|{text}\n".encode())


def fill_disk(path: str) -> None:
    chunk = b"\0" * (64 << 10)
    with open(path, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as e:
            say(f"disk full: {e.strerror}", err=True)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    say(f"rank {rank} of {world} starts")
    say(f"rank {rank} stderr line", err=True)
    if MODE == "kill_in_collective":
        pids = torch.zeros(world, dtype=torch.int64)
        pids[rank] = os.getpid()
        dist.all_reduce(pids)
    deadline = time.monotonic() + float(os.environ.get("SECONDS", "30"))
    step = 0
    while step < STEPS or (MODE == "long" and time.monotonic() < deadline):
        x = torch.randn(16, 8, generator=gen)
        y = torch.randn(16, 2, generator=gen)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)  # the usual logging all-reduce, whatever the DDP
        say(f"rank {rank} step {step} loss {loss.item():.6f} mean {mean_loss.item() / world:.6f}")
        if MODE == "kill_in_collective" and step == 3:
            if rank == 0:
                time.sleep(1.5)  # rank 1 is inside the all_reduce below by now
                os.kill(int(pids[1]), signal.SIGKILL)
                time.sleep(0.5)
            dist.all_reduce(torch.ones(10))
        if MODE == "sigstop" and step == 3 and rank == 1:
            say("rank 1 stops itself")
            os.kill(os.getpid(), signal.SIGSTOP)
        if MODE == "fill_disk" and step == STEPS // 2 and rank == 0:
            fill_disk(os.environ["FILL_PATH"])
        step += 1
        if STEP_SLEEP:
            time.sleep(STEP_SLEEP)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    if os.environ.get("OUT_DIR"):
        np.save(os.path.join(os.environ["OUT_DIR"], f"params-rank{rank}.npy"), params)
    dist.barrier()
    if MODE == "exit_code" and rank == 1:
        say("rank 1 exits with status 3")
        sys.exit(3)
    say(f"rank {rank} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
