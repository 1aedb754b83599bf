"""Cost of recording one collective inside a rank: the recorder alone, and a patched call.

Times are CPU time (robust when other jobs share the cores); the patched and unpatched
calls are measured in alternating rounds and compared by their medians.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROUNDS = 9
TARGET_US = 5.0


def _round_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time_ns()
    for _ in range(n):
        fn()
    return (time.process_time_ns() - t0) / n / 1000


def interleaved(pairs: dict[str, Callable[[], object]], n: int) -> dict[str, float]:
    """Median per-call CPU microseconds of each function, measured round-robin."""
    samples: dict[str, list[float]] = {k: [] for k in pairs}
    for _ in range(ROUNDS):
        for name, fn in pairs.items():
            samples[name].append(_round_us(fn, n))
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    os.environ["DDPDOCTOR_RUN_DIR"] = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
    import torch
    import torch.distributed as dist

    from ddpdoctor.runtime import patches, recorder

    torch.set_num_threads(1)
    raw_all_reduce, raw_barrier = dist.all_reduce, dist.barrier
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    patches.install()
    patches.on_init()
    rec = recorder.active()
    assert rec is not None
    t = torch.ones(1024)
    outs = [torch.ones(1024)]

    rec_only = interleaved({
        "one tensor": lambda: rec.end(rec.begin("all_reduce", None, [t], (), "sum")),
        "1 in + 1 out": lambda: rec.end(rec.begin("all_gather", None, [t], outs)),
    }, 20_000)
    calls = interleaved({
        "all_reduce raw": lambda: raw_all_reduce(t),
        "all_reduce recorded": lambda: dist.all_reduce(t),
        "barrier raw": lambda: raw_barrier(),
        "barrier recorded": lambda: dist.barrier(),
    }, 4_000)
    dist.destroy_process_group()

    overhead = calls["all_reduce recorded"] - calls["all_reduce raw"]
    rows = [
        ("recorder begin+end, 1 tensor", rec_only["one tensor"]),
        ("recorder begin+end, 1 in + 1 out tensor", rec_only["1 in + 1 out"]),
        ("dist.all_reduce 4 KB, world 1, unpatched", calls["all_reduce raw"]),
        ("dist.all_reduce 4 KB, world 1, recorded", calls["all_reduce recorded"]),
        ("  recording overhead per all_reduce", overhead),
        ("dist.barrier, world 1, unpatched", calls["barrier raw"]),
        ("dist.barrier, world 1, recorded", calls["barrier recorded"]),
        ("  recording overhead per barrier",
         calls["barrier recorded"] - calls["barrier raw"]),
    ]
    print(f"{'cost of recording one collective (CPU us/call)':48} {'us':>8}")
    for name, value in rows:
        print(f"{name:48} {value:8.2f}")
    print(f"target: recorder < {TARGET_US} us -> "
          f"{'met' if rec_only['one tensor'] < TARGET_US else 'NOT met'}; "
          f"recorded/unpatched all_reduce ratio {calls['all_reduce recorded'] / calls['all_reduce raw']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
