"""A job for bench_ddp_torch_parts.py: under `ddpdoctor run --ddp torch`, four torch DDPs
of the same MLP step in turn (torch's own reducer on torch's group, unpatched; the DDP as
`--ddp torch` builds it now: torch's reducer on torch's group, its buckets left to the
flight recorder; the reducer on a group that forwards each bucket from Python without
recording it; the reducer on ddpdoctor's recording group, as `--ddp torch` had it before
2026-11-26's evening), and each step's wall and main-thread CPU time is kept.  Also, with
BENCH_STEPLOG set, a single DDP's step start times and lengths for the supervisor windows."""

import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpdoctor.ddp import recorded_group

STEPS = int(os.environ.get("BENCH_STEPS", "1200"))
WARMUP = 20
WIDTH = 512


class ForwardingGroup(recorded_group.RecordedGroup):
    """The recording group's Python path without its records: the reducer's call into
    Python, the call into gloo, the future kept and waited at the end of backward."""

    def allreduce(self, tensors, opts):  # noqa: ANN001, ANN201 - torch's signature
        t = tensors[0] if len(tensors) == 1 else None
        if t is not None and t.is_floating_point():
            self._index(recorded_group._task_id())
            work = self._pg.allreduce(tensors, opts)
            self._launched.append((work.get_future(), -1))
            return work
        return self._pg.allreduce(tensors, opts)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, 10))


def four_ddps() -> dict:
    os.environ[recorded_group.BUCKETS_ENV] = "flight_recorder"  # buckets left to torch's
    try:
        flight = DDP(mlp())
    finally:
        del os.environ[recorded_group.BUCKETS_ENV]
    os.environ[recorded_group.BUCKETS_ENV] = "python"  # the recording group (the default)
    try:
        recorded = DDP(mlp())
        mine = recorded_group.RecordedGroup
        recorded_group.RecordedGroup = ForwardingGroup  # what the next DDP's reducer gets
        try:
            forwarding = DDP(mlp())
        finally:
            recorded_group.RecordedGroup = mine
    finally:
        del os.environ[recorded_group.BUCKETS_ENV]
    torch_own = DDP.__new__(DDP)
    DDP.__init__.__ddpdoctor_original__(torch_own, mlp())  # torch's own, unpatched
    groups = [type(recorded_group.group_of(m)).__name__ for m in (flight, recorded, forwarding)]
    assert groups == ["FlightRecordedBuckets", "RecordedGroup", "ForwardingGroup"], groups
    assert recorded_group.group_of(torch_own) is None
    return {"torch": torch_own, "flight recorder": flight, "forwarding": forwarding,
            "recording": recorded}


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
         y: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    x, y = torch.randn(64, WIDTH), torch.randint(0, 10, (64,))
    log = os.environ.get("BENCH_STEPLOG")
    if log:  # one DDP, every step's start and length
        model = DDP(mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        rows = []
        for _ in range(STEPS):
            t0 = time.time()
            step(model, opt, x, y)
            rows.append((t0, time.time() - t0))
        if dist.get_rank() == 0:
            with open(log, "w") as f:
                json.dump(rows, f)
    else:
        models = four_ddps()
        opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
        names = list(models)
        wall: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        for i in range(STEPS + WARMUP):
            for name in names[i % 4:] + names[:i % 4]:  # each follows each in turn
                c0, t0 = time.thread_time(), time.perf_counter()
                step(models[name], opts[name], x, y)
                if i >= WARMUP:
                    wall[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.thread_time() - c0)
        if dist.get_rank() == 0:
            print("BENCH " + json.dumps({k: {"wall_ms": statistics.median(wall[k]) * 1e3,
                                             "cpu_us": statistics.median(cpu[k]) * 1e6}
                                         for k in names}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
