#!/usr/bin/env python
""""Rank 0 downloads first", done wrong: only the waiting ranks call the barrier.

Ranks 1 and 2 wait in dist.barrier() for rank 0 to fetch the dataset, but rank 0 downloads
and goes straight on to wrap the model in DDP, whose first collective (broadcasting the
weights) never meets their barrier. The job hangs before the first step.
Source: the article "torch.distributed多卡/多GPU/分布式DPP(二)" (torch_distributed_zero_first:
a barrier on both sides) and Lightning-AI/pytorch-lightning#17733 ("easy to forget").
Run: torchrun --nproc-per-node 3 download_first_wrong.py
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


def download(path: Path) -> None:
    """Stands in for fetching a dataset: writes it to `path`."""
    g = torch.Generator().manual_seed(0)
    torch.save((torch.randn(24, 8, generator=g), torch.randint(0, 2, (24,), generator=g)), path)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    path = job_dir(os.getppid()) / "data.pt"  # the ranks' parent is the launcher

    # BUG: rank 0 never calls the barrier that the other ranks wait in.
    if rank == 0:
        download(path)
    else:
        dist.barrier()  # wait until rank 0 has downloaded the data
    data = TensorDataset(*torch.load(path))

    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print(f"rank {rank}: done", flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(path.parent, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
