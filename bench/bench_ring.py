"""Benchmark: ddpdoctor's ring all-reduce against gloo's dist.all_reduce, in one job.

    python bench/bench_ring.py [--sizes-mb 1 25 100] [--worlds 2 4] [--reps 7]

Both run in the same processes, alternating call by call (gloo, ring, gloo, ring, ...)
so that noise from other jobs on the machine hits both alike; the table shows medians.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ddpdoctor.ddp import ring  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(fn, t: torch.Tensor) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn(t)
    return time.perf_counter() - t0


def _rank(rank: int, world: int, port: int, sizes_mb: list[float], reps: int,
          out: "mp.Queue") -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    rows = []
    for mb in sizes_mb:
        numel = int(mb * (1 << 20)) // 4
        base = torch.randn(numel)
        t = base.clone()
        ring.all_reduce(t)  # warm up both, and check they agree
        ref = base.clone()
        dist.all_reduce(ref)
        ok = torch.allclose(t, ref, rtol=1e-5, atol=1e-5)
        gloo_t, ring_t = [], []
        for _ in range(reps):
            gloo_t.append(_timed(dist.all_reduce, t))
            ring_t.append(_timed(ring.all_reduce, t))
        ratios = [r / g for g, r in zip(gloo_t, ring_t)]  # neighbours share the noise
        rows.append((mb, statistics.median(gloo_t), statistics.median(ring_t),
                     statistics.median(ratios), ok))
    if rank == 0:
        out.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def run_world(world: int, sizes_mb: list[float], reps: int) -> list[tuple]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, sizes_mb, reps, out))
             for r in range(world)]
    for p in procs:
        p.start()
    rows = out.get(timeout=1800)
    for p in procs:
        p.join()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 25, 100])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"ring vs gloo all_reduce, float32, 1 thread a rank, median of {args.reps} "
          f"alternating runs ({os.cpu_count()} cores)")
    print("ring/gloo is the median of the ratios of neighbouring calls")
    print(f"{'world':>5} {'MB':>6} {'gloo ms':>9} {'ring ms':>9} {'ring/gloo':>9}  equal")
    for world in args.worlds:
        for mb, g, r, ratio, ok in run_world(world, args.sizes_mb, args.reps):
            print(f"{world:>5} {mb:>6g} {g * 1e3:>9.1f} {r * 1e3:>9.1f} {ratio:>9.2f}  {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
