"""A small torch-DDP training job that prints its median step time (for overhead benches)."""

import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("BENCH_STEPS", "60"))
WARMUP = 10


def pin_rank() -> None:
    """BENCH_PIN_RANKS=1: this rank's main thread, and the threads it starts from here on
    (gloo's), run on core LOCAL_RANK only, so that the scheduler cannot place them
    differently from one launch to the next."""
    if os.environ.get("BENCH_PIN_RANKS") == "1":
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]})


def main() -> None:
    torch.set_num_threads(1)
    pin_rank()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    width = int(os.environ.get("BENCH_WIDTH", "512"))
    model = DDP(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, width), torch.randint(0, 10, (64,))
    times = []
    for step in range(STEPS + WARMUP):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        print("BENCH " + json.dumps({"median_ms": statistics.median(times) * 1000,
                                     "ddp": type(model).__module__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
