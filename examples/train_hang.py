"""A small DDP training job with a classic bug: rank 0 alone logs a metric with all_reduce.

Run it under ddpdoctor:  ddpdoctor run --hang-timeout 10 --nproc-per-node 2 examples/train_hang.py
Without the bug (--fixed), it trains to the end and ddpdoctor reports "No problem found".
"""

import argparse
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true", help="run without the bug")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 9:
            metric = loss.detach().clone()
            if args.fixed or rank == 0:  # the bug: only rank 0 enters the collective
                dist.all_reduce(metric)
            if rank == 0:
                print(f"step {step}: loss {metric.item() / dist.get_world_size():.4f}",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
