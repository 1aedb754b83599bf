"""Cost of recording one collective inside a rank: the recorder alone, and a patched call.

The recorder alone is timed in this thread's CPU time (robust when other jobs share the
cores); whole calls, which gloo runs partly on its own threads, in wall time.  Patched and
unpatched calls are measured in alternating rounds and compared by their medians.
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROUNDS = 9
PAIRED_ROUNDS = 31  # pairs of rounds for the wall time recording adds to a real call
CPU_GOAL_US = 3.0  # recording one collective, thread CPU
WALL_GOAL_US = 5.0  # wall time added around a real 4 KB all_reduce at world 1


def _round_us(fn: Callable[[], object], n: int, clock: Callable[[], int]) -> float:
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n / 1000


def interleaved(pairs: dict[str, Callable[[], object]], n: int,
                clock: Callable[[], int] = time.perf_counter_ns) -> dict[str, float]:
    """Median microseconds per call of each function, measured round-robin."""
    samples: dict[str, list[float]] = {k: [] for k in pairs}
    for _ in range(ROUNDS):
        for name, fn in pairs.items():
            samples[name].append(_round_us(fn, n, clock))
    return {k: statistics.median(v) for k, v in samples.items()}


def paired_difference(raw: Callable[[], object], recorded: Callable[[], object], n: int,
                      rounds: int = PAIRED_ROUNDS) -> float:
    """Median over ``rounds`` adjacent pairs of rounds (ABBA order) of the microseconds
    per call ``recorded`` takes more than ``raw``: drift in the machine's speed over the
    run (other jobs, the VM's stall phases) cancels within a pair."""
    diffs = []
    for i in range(rounds):
        us = {}
        for name in (("raw", "recorded") if i % 2 == 0 else ("recorded", "raw")):
            us[name] = _round_us(raw if name == "raw" else recorded, n, time.perf_counter_ns)
        diffs.append(us["recorded"] - us["raw"])
    return statistics.median(diffs)


def fresh_ring_us(rounds: int = 7) -> float:
    """Thread CPU per record of filling a new trace's whole ring (its creation included): the
    page faults of its first records and the disk reserved for them, which a ring in use
    (the rows above, after their first round) no longer pays."""
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.writer import TraceWriter

    text = b"1024||float32|train.py:10"
    samples = []
    for _ in range(rounds):
        folder = tempfile.mkdtemp(dir=os.environ["DDPDOCTOR_RUN_DIR"])
        t0 = time.thread_time_ns()
        writer = TraceWriter(Path(folder), "bench")
        append = writer.append
        for i in range(L.DEFAULT_CAPACITY):
            append(1, 1, 1, 0, 0, i, i, 0, 1024, -1, 0, 0, -1, text)
        samples.append((time.thread_time_ns() - t0) / L.DEFAULT_CAPACITY / 1000)
        writer.close()
        shutil.rmtree(folder)
    return statistics.median(samples)


def main() -> int:
    os.environ["DDPDOCTOR_RUN_DIR"] = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
    atexit.register(shutil.rmtree, os.environ["DDPDOCTOR_RUN_DIR"], ignore_errors=True)
    import torch
    import torch.distributed as dist

    from ddpdoctor.runtime import init_hooks, patches, recorder

    torch.set_num_threads(1)
    raw_all_reduce, raw_barrier = dist.all_reduce, dist.barrier
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    patches.install()
    init_hooks.on_init()
    rec = recorder.active()
    assert rec is not None
    t = torch.ones(1024)
    outs = [torch.ones(1024)]

    def nothing(*args: object, **kwargs: object) -> None:
        return None

    wrapped_all_reduce = patches._wrap("all_reduce", nothing, patches.SPECS["all_reduce"])
    wrapped_broadcast = patches._wrap("broadcast", nothing, patches.SPECS["broadcast"])
    wrapped_all_gather = patches._wrap("all_gather", nothing, patches.SPECS["all_gather"])
    rec_only = interleaved({
        "one tensor": lambda: rec.end(rec.begin("all_reduce", None, [t], (), "sum")),
        "1 in + 1 out": lambda: rec.end(rec.begin("all_gather", None, [t], outs)),
        "all_reduce(t)": lambda: wrapped_all_reduce(t),
        "broadcast(t, src=0)": lambda: wrapped_broadcast(t, src=0),
        "all_gather(outs, t)": lambda: wrapped_all_gather(outs, t),
    }, 20_000, clock=time.thread_time_ns)
    calls = interleaved({
        "all_reduce raw": lambda: raw_all_reduce(t),
        "all_reduce recorded": lambda: dist.all_reduce(t),
        "barrier raw": lambda: raw_barrier(),
        "barrier recorded": lambda: dist.barrier(),
    }, 4_000)
    done_work = dist.all_reduce(t, async_op=True)
    done_work.wait()
    raw_wait = type(done_work).wait.__ddpdoctor_original__
    waits = interleaved({
        "wait raw": lambda: raw_wait(done_work),
        "wait patched": lambda: done_work.wait(),
    }, 20_000, clock=time.thread_time_ns)
    overhead = paired_difference(lambda: raw_all_reduce(t), lambda: dist.all_reduce(t), 1_000)
    calls_cpu = interleaved({
        "all_reduce raw": lambda: raw_all_reduce(t),
        "all_reduce recorded": lambda: dist.all_reduce(t),
    }, 4_000, clock=time.thread_time_ns)
    dist.destroy_process_group()
    fresh = fresh_ring_us()

    full = rec_only["all_reduce(t)"]
    rows = [
        ("recorder begin+end, 1 tensor (thread CPU)", rec_only["one tensor"]),
        ("recorder begin+end, 1 in + 1 out (thread CPU)", rec_only["1 in + 1 out"]),
        ("whole recording of dist.all_reduce(t) (CPU)", full),
        ("whole recording of dist.broadcast(t, src=0) (CPU)",
         rec_only["broadcast(t, src=0)"]),
        ("whole recording of dist.all_gather(outs, t) (CPU)",
         rec_only["all_gather(outs, t)"]),
        ("dist.all_reduce 4 KB, world 1, unpatched", calls["all_reduce raw"]),
        ("dist.all_reduce 4 KB, world 1, recorded", calls["all_reduce recorded"]),
        ("  recording overhead per all_reduce", overhead),
        ("  (difference of the two medians above)",
         calls["all_reduce recorded"] - calls["all_reduce raw"]),
        ("dist.all_reduce 4 KB, unpatched (thread CPU)", calls_cpu["all_reduce raw"]),
        ("dist.all_reduce 4 KB, recorded (thread CPU)", calls_cpu["all_reduce recorded"]),
        ("  recording CPU per all_reduce",
         calls_cpu["all_reduce recorded"] - calls_cpu["all_reduce raw"]),
        ("  Work.wait patch, paid by every sync call too (CPU)",
         waits["wait patched"] - waits["wait raw"]),
        ("one record into a new trace, its whole ring (CPU)", fresh),
        ("dist.barrier, world 1, unpatched", calls["barrier raw"]),
        ("dist.barrier, world 1, recorded", calls["barrier recorded"]),
        ("  recording overhead per barrier",
         calls["barrier recorded"] - calls["barrier raw"]),
    ]
    print(f"{'cost of recording one collective':48} {'us/call':>8}")
    for name, value in rows:
        print(f"{name:48} {value:8.2f}")
    print("(whole recording = the patched function around a no-op collective: argument "
          "parsing, call sites, record, end time)")
    print("(unpatched = the original collective; Work.wait stays patched class-wide, its "
          "cost is the row above)")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; medians of "
          f"{ROUNDS} alternating rounds; the recording overhead per all_reduce is the "
          f"median of {PAIRED_ROUNDS} paired rounds' differences")
    print(f"goal: recording one all_reduce < {CPU_GOAL_US} us thread CPU -> "
          f"{'met' if full < CPU_GOAL_US else 'NOT met'} ({full:.2f} us)")
    print(f"goal: wall time added around a real 4 KB all_reduce < {WALL_GOAL_US} us -> "
          f"{'met' if overhead < WALL_GOAL_US else 'NOT met'} ({overhead:.2f} us, ratio "
          f"{calls['all_reduce recorded'] / calls['all_reduce raw']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
