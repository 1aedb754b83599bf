#!/usr/bin/env python
"""Fixed twin of barrier_in_rank0_checkpoint.py: every rank calls the barrier, after the save.

Rank 0 saves, then all ranks meet at the barrier, so no rank reads the checkpoint before it
is written and no rank is left waiting alone.
Run: torchrun --nproc-per-node 3 barrier_in_rank0_checkpoint_fixed.py
"""
import datetime
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def job_dir(job_pid: int) -> Path:
    """Scratch space shared by one job's ranks; removes what killed runs left behind."""
    root = Path(tempfile.gettempdir()) / "ddpdoctor-sample-bugs"
    for old in root.glob("job-*"):
        try:
            os.kill(int(old.name[4:]), 0)
        except ProcessLookupError:  # that job is gone (a hanging bug gets killed)
            shutil.rmtree(old, ignore_errors=True)
        except (PermissionError, ValueError):
            pass
    path = root / f"job-{job_pid}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    ckpt_dir = job_dir(os.getppid())  # the ranks' parent is the launcher
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(24, 8, generator=g), torch.randint(0, 2, (24,), generator=g))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if rank == 0:
            torch.save(model.module.state_dict(), ckpt_dir / f"epoch{epoch}.pt")
            print(f"epoch {epoch}: checkpoint saved", flush=True)
        # FIX: the barrier is outside the `if`: every rank calls it.
        dist.barrier()
    dist.barrier()
    if rank == 0:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
