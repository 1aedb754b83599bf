"""Benchmark: a training step under ddpdoctor's DDP against torch's DDP, in one job.

    python bench/bench_ddp.py [--world 2] [--steps 15] [--batch 64]

Two MLPs (3 x 1024 wide, ~3M parameters; 6 x 2048 wide, ~25M), gloo, one thread a rank.
Each step is forward + backward + SGD step; the three variants (torch DDP, ddpdoctor DDP,
the bare module without communication) alternate step by step, torch's and ddpdoctor's
order swapped every step (neither always runs right after the other), so that noise from
other jobs hits them alike; the table shows medians after warm-up.  The small model runs
three times ``--steps`` (a step is ~25 ms): at 41 its ratio moved by +-0.05 between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddpdoctor.ddp.wrapper import DistributedDataParallel as RingDDP  # noqa: E402
from spawn_job import run_ranks  # noqa: E402

MODELS = {"mlp3x1024": (3, 1024, 3), "mlp6x2048": (6, 2048, 1)}  # layers, width, x --steps
WARMUP = 3


def mlp(layers: int, width: int) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers - 1):
        mods += [nn.Linear(width, width), nn.ReLU()]
    mods.append(nn.Linear(width, width))
    return nn.Sequential(*mods)


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    return time.perf_counter() - t0


def _rank(rank: int, world: int, port: int, steps: int, batch: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    rows = []
    for name, (layers, width, factor) in MODELS.items():
        torch.manual_seed(0)
        base = mlp(layers, width)
        variants = {
            "torch": nn.parallel.DistributedDataParallel(mlp(layers, width)),
            "ring": RingDDP(mlp(layers, width)),
            "local": base,
        }
        opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in variants.items()}
        times: dict[str, list[float]] = {k: [] for k in variants}
        x = torch.randn(batch, width)
        order = list(variants)
        for i in range(WARMUP + steps * factor):
            order[:2] = order[1::-1]  # torch, ring / ring, torch
            for k in order:
                m = variants[k]
                t = _step(m, opts[k], x)
                if i >= WARMUP:
                    times[k].append(t)
        nparams = sum(p.numel() for p in base.parameters())
        med = {k: statistics.median(v) for k, v in times.items()}
        med["ratio"] = statistics.median(r / t for r, t in zip(times["ring"], times["torch"]))
        rows.append((name, nparams, med))
        del variants, opts
    if rank == 0:
        out.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def measure(world: int = 2, steps: int = 15, batch: int = 64) -> list[tuple]:
    """Rows ``(model, nparams, {"torch", "ring", "local", "ratio"})`` from one job."""
    return run_ranks(_rank, world, steps, batch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    rows = measure(args.world, args.steps, args.batch)
    print(f"DDP step time, world {args.world}, gloo, batch {args.batch}, 1 thread a rank, "
          f"median of {args.steps} alternating steps ({os.cpu_count()} cores)")
    print("ring/torch is the median of the ratios of neighbouring steps")
    print(f"{'model':<10} {'params':>7} {'torch ms':>9} {'ring ms':>9} {'ring/torch':>10} "
          f"{'no-comm ms':>10}")
    for name, nparams, t in rows:
        print(f"{name:<10} {nparams / 1e6:>6.1f}M {t['torch'] * 1e3:>9.1f} "
              f"{t['ring'] * 1e3:>9.1f} {t['ratio']:>10.2f} "
              f"{t['local'] * 1e3:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
