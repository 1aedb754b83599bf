"""Benchmark: what recording the rank's control flow costs a training step (Python 3.12+).

    python bench/bench_control_flow.py [--pairs 9] [--steps 60]

One process records into a scratch run dir as a rank does under `ddpdoctor run` (a
Recorder, and runtime/control_flow.py instrumenting this file's code, which is "the user's"
here).  Each step ends at a collective's begin: its record is written, on and off alike, and
"on" first closes the segment and writes its PATH record, as the recorder does.  "off" runs the same code with the
instrumentation taken out; on and off alternate, epoch by epoch in ABBA order, so load from other
jobs on the machine hits both alike; times are the thread's CPU time.  A pair's ratio is on/off
of two adjacent epochs; the table gives the median over the pairs and a control (off
against off) whose ratio is the measurement's own spread.

Workloads: the bench models (an MLP of width 512 and 1024, a typical loop: 6 branches a
step), a Python-heavy loop (many small ops, a loop of 800 or 40 items with branches and a
helper), and a sub-millisecond step (shown, not judged).  "model" is the cost the unit costs
predict (events a step x an event's cost in a tight loop, on against off, plus what a step
spends more at its collective's begin: closing and writing its segment, waking silenced
branches, beside the collective's own record): on a loaded machine two epochs of a real step differ by more than the goal.
Goal (issue 51): <= 1.01 for steps of 2 ms or more, judged by the model (exit 1 when a judged
workload misses it); the direct measure is shown beside it, to be read on a quiet machine.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

RUN_DIR = tempfile.mkdtemp(prefix="ddpdoctor-bench-flow-")
atexit.register(shutil.rmtree, RUN_DIR, ignore_errors=True)
os.environ["DDPDOCTOR_RUN_DIR"] = RUN_DIR
os.environ.setdefault("RANK", "0")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from ddpdoctor.runtime import control_flow  # noqa: E402
from ddpdoctor.runtime import recorder as R  # noqa: E402

GOAL = 1.01
JUDGED_MS = 2.0
_clock = time.thread_time


def mlp(width: int) -> tuple[Callable[[int], None], str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
                          nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, width), torch.randint(0, 10, (64,))
    accumulate, log_every = 2, 10

    def step(i: int) -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            return
        loss.backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()
        if i % log_every == 0 and i > 0:
            _ = float(loss)
        for group in opt.param_groups:
            if group["lr"] > 1:
                group["lr"] = 1

    return step, f"MLP width {width}"


def _helper(t: torch.Tensor, k: int) -> torch.Tensor:
    if k % 3 == 0:
        return t * 2
    elif k % 3 == 1:
        return t + 1
    return t


def python_heavy(count: int = 40) -> tuple[Callable[[int], None], str]:
    items = [torch.randn(8) for _ in range(count)]

    def step(i: int) -> None:
        total = torch.zeros(8)
        for k, t in enumerate(items):
            if k % 5 == 0:
                continue
            total = total + _helper(t, k)
        if total.sum() > 1e9:
            total.zero_()

    return step, f"Python-heavy ({count} items, branches)"


def tiny() -> tuple[Callable[[int], None], str]:
    model = nn.Linear(16, 4)
    x = torch.randn(4, 16)

    def step(i: int) -> None:
        if i % 2:
            model(x).sum().backward()
        else:
            model.zero_grad()

    return step, "sub-ms step"


def _collective(seq: int) -> None:
    """The record the recorder writes at a collective's begin, on and off alike: the first
    write after a step's work meets cold caches, whichever record it is."""
    R.active().writer.append(1, 0, 0, 0, 0, seq, 0, 0, 0, 0, 0, 0, 0, b"bench.py:1")


def epoch(step: Callable[[int], None], steps: int, flow: Any, seq: list[int],
          closing: list[float] | None = None) -> float:
    """Seconds a step; ``closing`` gets the seconds a step spent at its collective's begin
    (closing its segment, when on, and writing the collective's record)."""
    t0 = _clock()
    spent = 0.0
    for i in range(steps):
        step(i)
        seq[0] += 1
        c0 = _clock()
        if flow is not None:
            flow.close(0, seq[0])  # a collective begins: the segment is written
        _collective(seq[0])
        spent += _clock() - c0
    if closing is not None:
        closing.append(spent / steps)
    return (_clock() - t0) / steps


def set_on(flow: Any, on: bool) -> None:
    events = flow.events if on else 0
    for code in flow.codes.values():
        sys.monitoring.set_local_events(flow.tool, code, events)


def measure(step: Callable[[int], None], steps: int, pairs: int, flow: Any) -> dict:
    """Each pair is measured in ABBA order (on, off, off, on), so neither side always runs
    first after a switch; the control runs off epochs in the same order against each other."""
    seq = [0]
    epoch(step, steps, None, seq)  # warm up

    closing: dict[bool, list[float]] = {True: [], False: []}

    def timed(on: bool) -> float:
        set_on(flow, on)
        return epoch(step, steps, flow if on else None, seq, closing[on])

    ratios, control, ons, offs = [], [], [], []
    for _ in range(pairs):
        on1, off1, off2, on2 = timed(True), timed(False), timed(False), timed(True)
        c1, c2, c3, c4 = timed(False), timed(False), timed(False), timed(False)
        ratios.append((on1 + on2) / (off1 + off2))
        control.append((c1 + c4) / (c2 + c3))
        ons += [on1, on2]
        offs += [off1, off2]
    set_on(flow, True)
    return {"step_ms": statistics.median(offs) * 1e3, "ratio": statistics.median(ratios),
            "control": statistics.median(control), "fast": min(ons) / min(offs),
            "close_s": max(0.0, statistics.median(closing[True]) -
                           statistics.median(closing[False]))}


def events_per_step(step: Callable[[int], None], flow: Any) -> float:
    flow.seg.clear()
    step(1)
    step(2)
    n = sum(flow.seg.values())
    flow.close(0, -1)
    return n / 2


def _branchy(n: int) -> int:
    """A loop whose every iteration takes one of two ways: 2 BRANCH events an iteration
    (the loop's and the if's)."""
    total = 0
    for k in range(n):
        if k & 1:
            total += 1
    return total


def unit_costs(flow: Any, rounds: int = 7) -> tuple[float, float]:
    """(seconds an event, seconds a segment's close), each from a tight loop, on against
    off, the median of ``rounds``: the model of the cost, free of a loaded machine's noise
    between two epochs of a real step.  The segment is emptied after each call, as a
    collective would, so that no branch goes hot and silent."""
    flow.instrument(_branchy.__code__)
    calls, per_call = 4000, 6  # 12 events a call
    seg = flow.seg

    def loop() -> float:
        t0 = _clock()
        for _ in range(calls):
            _branchy(per_call)
            seg.clear()
        return _clock() - t0

    per_event = []
    for _ in range(rounds):
        set_on(flow, True)
        on = loop()
        set_on(flow, False)
        per_event.append(max(0.0, on - loop()) / (2 * per_call * calls))
    set_on(flow, True)
    closes = []
    for _ in range(rounds):
        t0 = _clock()
        for i in range(2000):
            _branchy(3)  # a few events, so that each close writes a PATH record
            flow.close(0, i)
        closes.append((_clock() - t0) / 2000)
    return statistics.median(per_event), statistics.median(closes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    if not control_flow.SUPPORTED:
        print("control flow is recorded on Python 3.12 and newer only: nothing to measure")
        return 0
    torch.set_num_threads(1)
    rec = R.active()
    flow = control_flow.start(rec)
    if flow is None:
        print("the control-flow recording did not start")
        return 1
    flow.instrument(sys.modules[__name__].__dict__["main"].__code__)
    flow.scan_modules()
    print(f"load average {os.getloadavg()[0]:.2f} (meaningful on a quiet machine)")
    event_s, close_s = unit_costs(flow)
    print(f"an event {event_s * 1e6:.3f} us, a segment's close and record {close_s * 1e6:.2f} us"
          " (tight loops, on against off)")
    print(f"{'workload':36} {'step ms':>8} {'events':>7} {'on/off':>7} {'control':>8} "
          f"{'fastest':>8} {'model':>7}")
    failed = False
    for make in (lambda: mlp(512), lambda: mlp(1024), lambda: python_heavy(800),
                 python_heavy, tiny):
        step, name = make()
        n = events_per_step(step, flow)
        m = measure(step, args.steps, args.pairs, flow)
        judged = m["step_ms"] >= JUDGED_MS
        model = 1 + (n * event_s + m["close_s"]) / (m["step_ms"] / 1e3)
        spread = abs(m["control"] - 1)
        # judged by the model: on a loaded machine the direct measure moves by several per
        # cent between two epochs of the same code (its control shows how much)
        miss = judged and model > GOAL
        failed |= miss
        print(f"{name:36} {m['step_ms']:8.3f} {n:7.0f} {m['ratio']:7.4f} {m['control']:8.4f} "
              f"{m['fast']:8.4f} {model:7.4f}" + ("  over the goal" if miss else "" if judged
                                                   else "  (shown, not judged)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
