"""Benchmark: ddpdoctor's ring all-reduce against gloo's dist.all_reduce, in one job.

    python bench/bench_ring.py [--sizes-mb 0.25 1 4 25 100] [--worlds 2 4] [--pairs 15]

Both run in the same processes, call by call alternating (gloo, ring, gloo, ring, ...;
the order swapped every pair), so that noise from other jobs on the machine, and the
phases in which many calls of both wait ~4 ms for a core to be woken (a 2-vCPU VM
does that to any all-reduce, gloo's too), hit both alike.  Every call is timed on its
own; a pair counts each side by its median call, and the ratio is the median over the
pairs of ring / gloo.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ddpdoctor.ddp import ring  # noqa: E402
from spawn_job import run_ranks  # noqa: E402


@dataclass(frozen=True)
class RingRow:
    """One size of one world: medians, the ratio, its spread, and whether results agree."""

    world: int
    mb: float
    gloo_ms: float
    ring_ms: float
    ratio: float
    ratio_iqr: float  # interquartile range of the pair ratios
    pairs: int
    equal: bool


def calls_per_batch(mb: float) -> int:
    """Enough calls for a steady median on small tensors, few on large ones."""
    return max(3, min(21, int(32 / mb)))


def _pair_ms(fns: dict[str, Callable[[], object]], order: tuple[str, ...],
             calls: int) -> dict[str, float]:
    """Median ms of each function over ``calls`` calls of each, called in turn."""
    dist.barrier()
    times: dict[str, list[float]] = {name: [] for name in order}
    clock = time.perf_counter
    for _ in range(calls):
        for name in order:
            t0 = clock()
            fns[name]()
            times[name].append(clock() - t0)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def _agrees(numel: int, world: int) -> bool:
    """The ring's result equals gloo's (float tolerance) and is the same bits on every rank."""
    g = torch.Generator().manual_seed(dist.get_rank())
    base = torch.randn(numel, generator=g)
    ours, ref = base.clone(), base.clone()
    ring.all_reduce(ours)
    dist.all_reduce(ref)
    ok = torch.allclose(ours, ref, rtol=1e-5, atol=1e-5)
    got = [torch.empty_like(ours) for _ in range(world)]
    dist.all_gather(got, ours)
    ok = ok and all(torch.equal(t, got[0]) for t in got)
    flag = torch.tensor([1 if ok else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _rank(rank: int, world: int, port: int, sizes_mb: list[float], pairs: int,
          out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    rows = []
    for mb in sizes_mb:
        numel = int(mb * (1 << 20)) // 4
        equal = _agrees(numel, world)
        t = torch.randn(numel)
        fns = {"gloo": lambda: dist.all_reduce(t), "ring": lambda: ring.all_reduce(t)}
        calls = calls_per_batch(mb)
        _pair_ms(fns, ("gloo", "ring"), 2)  # warm up: buffers, connections
        gloo_ms, ring_ms = [], []
        for i in range(pairs):
            order = ("gloo", "ring") if i % 2 == 0 else ("ring", "gloo")
            got = _pair_ms(fns, order, calls)
            gloo_ms.append(got["gloo"])
            ring_ms.append(got["ring"])
        ratios = sorted(r / g for g, r in zip(gloo_ms, ring_ms))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (0, 0, 0)
        rows.append(RingRow(world, mb, statistics.median(gloo_ms), statistics.median(ring_ms),
                            statistics.median(ratios), q3 - q1, pairs, equal))
    if rank == 0:
        out.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def run_world(world: int, sizes_mb: list[float], pairs: int) -> list[RingRow]:
    """Measure every size on a ``world``-rank gloo job on this machine."""
    return run_ranks(_rank, world, sizes_mb, pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[0.25, 1, 4, 25, 100])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--pairs", type=int, default=15)
    args = ap.parse_args(argv)
    print(f"ring vs gloo all_reduce, float32, 1 thread a rank, {args.pairs} alternating "
          f"pairs of batches ({os.cpu_count()} cores, load {os.getloadavg()[0]:.2f})")
    print("ms = median call; ring/gloo = median over pairs of the batch ratio (IQR)")
    print(f"{'world':>5} {'MB':>6} {'gloo ms':>9} {'ring ms':>9} {'ring/gloo':>9} {'IQR':>6}"
          f"  equal")
    for world in args.worlds:
        for r in run_world(world, args.sizes_mb, args.pairs):
            print(f"{world:>5} {r.mb:>6g} {r.gloo_ms:>9.2f} {r.ring_ms:>9.2f} {r.ratio:>9.2f} "
                  f"{r.ratio_iqr:>6.2f}  {r.equal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
