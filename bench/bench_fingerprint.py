"""Benchmark: what the replica checks (runtime/replica_watch.py) cost a DDP training step.

    python bench/bench_fingerprint.py [--world 2] [--window 4]

The DDP bench models (bench_ddp.py: MLPs 3 x 1024 wide, ~3M parameters, and 6 x 2048, ~25M),
gloo, one thread a rank, unpinned.  Three DDPs of the same model in one job, stepped in turn
(the order rotated every step, so that other jobs' noise hits them alike): ``plain``, the
reference; ``watched``, tracked by the replica checks at their default interval (chosen by
each rank from its measured costs after step 16) through the same optimizer hooks as under
``ddpdoctor run``; ``control``, a second plain DDP: its ratio to ``plain`` is the resolution.
Steps are summed (not medians: a check is one step in an interval) over ``--window``
intervals after the choice.  Each model has an LR scheduler stepped every step (the watched
one's through ddpdoctor's scheduler wrapper, its writes to the param group noted with their
line).  Two figures: the wall ratio watched / plain (with the control's), and the checks'
own time (every hook call, timed, and what the watched scheduler step costs beyond the
plain one's) over the plain steps' time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_ddp import MODELS, mlp  # noqa: E402
from spawn_job import run_ranks  # noqa: E402

GOAL = 0.01  # the checks may cost at most 1% of a step at the default interval
DECIDED = 16  # replica_prints.DECIDE_AT


def _watch(opt: torch.optim.Optimizer, spent: list[float]) -> None:
    """The hooks ``ddpdoctor run`` puts on every optimizer (runtime/torch_hooks.py), on this
    one only, each call timed."""
    from ddpdoctor.runtime import optimizer_steps
    from ddpdoctor.runtime import recorder as R
    from ddpdoctor.runtime import replica_watch

    def pre(o: Any, args: Any, kwargs: Any) -> None:
        t0 = time.perf_counter()
        if optimizer_steps.entered(o):
            replica_watch.before_step(o)
        spent.append(time.perf_counter() - t0)

    def post(o: Any, args: Any, kwargs: Any) -> None:
        t0 = time.perf_counter()
        if optimizer_steps.left():
            rec = R._recorder
            rec.steps += 1
            replica_watch.after_step(o, rec.steps)
        spent.append(time.perf_counter() - t0)

    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(post)


class _Decay(torch.optim.lr_scheduler.LambdaLR):
    """The plain models' scheduler: the lr changes every step."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        super().__init__(opt, lambda k: 0.999 ** k)

    def step(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().step(*args, **kwargs)


class _WatchedDecay(_Decay):
    """The watched model's: wrapped as ``ddpdoctor run`` wraps every LR scheduler."""

    def step(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().step(*args, **kwargs)


def _step(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, x: torch.Tensor,
          watch: Any = None) -> tuple[float, float]:
    """The step's wall time and its scheduler step's."""
    dist.barrier()
    t0 = time.perf_counter()
    if watch is not None and watch.last_step_at:
        # the interval is chosen from the time between this model's steps; in a job that
        # trains it alone that is its own step, here the other two models' steps lie between
        watch.last_step_at = t0
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    s0 = time.perf_counter()
    sched.step()
    t1 = time.perf_counter()
    return t1 - t0, t1 - s0


def _model_rows(name: str, layers: int, width: int, window: int, batch: int) -> dict:
    from ddpdoctor.runtime import recorder as R
    from ddpdoctor.runtime import replica_watch, replica_writes

    replica_writes._wrap_scheduler_step(_WatchedDecay)
    R._recorder.steps = 0  # each model's job counts its optimizer steps from its start
    torch.manual_seed(0)
    ddps = {k: nn.parallel.DistributedDataParallel(mlp(layers, width))
            for k in ("plain", "watched", "control")}
    replica_watch.track(ddps["watched"])
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in ddps.items()}
    scheds = {k: (_WatchedDecay if k == "watched" else _Decay)(o) for k, o in opts.items()}
    spent: list[float] = []
    _watch(opts["watched"], spent)
    watch = replica_watch._watch
    x = torch.randn(batch, width)
    order = list(ddps)
    times: dict[str, list[float]] = {k: [] for k in ddps}
    sched_times: dict[str, list[float]] = {k: [] for k in ddps}
    step, end, start_spent = 0, None, 0
    while end is None or step < end:
        step += 1
        order = order[1:] + order[:1]
        for k in order:
            t, ts = _step(ddps[k], opts[k], scheds[k], x, watch if k == "watched" else None)
            if step > DECIDED:
                times[k].append(t)
                sched_times[k].append(ts)
        if step == DECIDED:  # every rank chooses its own interval: run the longest one's
            every = torch.tensor([watch.schedule.every or DECIDED])
            dist.all_reduce(every, op=dist.ReduceOp.MAX)
            end = DECIDED + window * int(every.item())
            start_spent = len(spent)
    total = {k: sum(v) for k, v in times.items()}
    checks = sum(spent[start_spent:]) + max(0.0, sum(sched_times["watched"]) - sum(
        sched_times["plain"]))
    replica_watch._watch.replicas = []  # the next model's job starts clean
    return {"every": watch.schedule.every, "steps": len(times["plain"]),
            "plain_ms": 1e3 * total["plain"] / len(times["plain"]),
            "ratio": total["watched"] / total["plain"],
            "control": total["control"] / total["plain"],
            "checks": checks / total["plain"]}


def _rank(rank: int, world: int, port: int, window: int, batch: int, out: Any) -> None:
    torch.set_num_threads(1)
    run_dir = tempfile.mkdtemp(prefix="ddpdoctor-bench-fp-")
    os.environ["DDPDOCTOR_RUN_DIR"] = run_dir
    try:
        from ddpdoctor.runtime import recorder as R

        R.active()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        rows = []
        for name, (layers, width, _) in MODELS.items():
            rows.append((name, _model_rows(name, layers, width, window, batch)))
            from ddpdoctor.runtime import replica_watch

            replica_watch._watch = None
        if rank == 0:
            out.put(rows)
        dist.barrier()
        dist.destroy_process_group()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--window", type=int, default=4, help="intervals measured after the "
                    "interval is chosen")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    rows = run_ranks(_rank, args.world, args.window, args.batch)
    print(f"replica checks, world {args.world}, gloo, batch {args.batch}, 1 thread a rank, "
          f"unpinned, {os.cpu_count()} cores; sums over {args.window} default intervals")
    print(f"{'model':<10} {'every':>5} {'steps':>5} {'plain ms':>8} {'watched/plain':>13} "
          f"{'control':>8} {'checks/step':>11} {'goal':>5}")
    met = 0
    for name, r in rows:
        ok = r["checks"] <= GOAL and r["ratio"] - 1 <= GOAL + abs(r["control"] - 1)
        met += ok
        print(f"{name:<10} {r['every']:>5} {r['steps']:>5} {r['plain_ms']:>8.1f} "
              f"{r['ratio']:>13.3f} {r['control']:>8.3f} {100 * r['checks']:>10.2f}% "
              f"{'yes' if ok else 'no':>5}")
    print(f"{met} of {len(rows)} within {100 * GOAL:.0f}% of a step "
          "(the checks' own time; the wall ratio within the control's spread)")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
