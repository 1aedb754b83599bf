"""The whole cost table in one command: every figure, its goal, whether it is met.

    python bench/run_all.py [--quick] [--only ring ddp run record probes] [--raw]

Runs the bench scripts of this directory (ring and DDP in-process; recording and probes
as their own processes, whose output is parsed) and prints one row per figure:
measured, goal, met?, and the 1-minute load average before and after that measurement.
Every figure is a ratio or a difference against a reference measured in the same run,
alternating with it (>= 7 pairs unless --quick), so load from other jobs hits both.
On a loaded machine (load average above the core count) the numbers say little.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

RING_GOALS = {0.25: 1.10, 1.0: 1.0, 4.0: 1.0, 25.0: 1.0, 100.0: 1.0}


@dataclass(frozen=True)
class Row:
    """One line of the table; ``value`` None when the figure could not be measured."""

    figure: str
    value: float | None
    unit: str
    goal: float
    load: str
    note: str = ""

    @property
    def met(self) -> str:
        if self.value is None:
            return "n/a"
        return "yes" if self.value <= self.goal else "NO"

    def cells(self) -> list[str]:
        shown = "n/a" if self.value is None else f"{self.value:.3f}{self.unit}"
        goal = f"{'<' if self.unit else '<='} {self.goal:g}{self.unit}"
        return [self.figure, shown, goal, self.met, self.load, self.note]


def load_span(fn: Callable[[], list[Row]]) -> list[Row]:
    """Run ``fn``; stamp its rows with the load average before and after."""
    before = os.getloadavg()[0]
    rows = fn()
    load = f"{before:.1f}-{os.getloadavg()[0]:.1f}"
    return [Row(r.figure, r.value, r.unit, r.goal, load, r.note) for r in rows]


def ring_rows(quick: bool) -> list[Row]:
    import bench_ring

    sizes = list(RING_GOALS)
    out = []
    for r in bench_ring.run_world(2, sizes, 7 if quick else 15):
        note = f"gloo {r.gloo_ms:.2f} ms, ring {r.ring_ms:.2f} ms, IQR {r.ratio_iqr:.2f}"
        if not r.equal:
            note += ", RESULTS DIFFER"
        out.append(Row(f"ring / gloo all_reduce, world 2, {r.mb:g} MB", r.ratio, "",
                       RING_GOALS[r.mb], "", note))
    return out


def ddp_rows(quick: bool) -> list[Row]:
    import bench_ddp

    return [Row(f"DDP step ring / torch, {name}", t["ratio"], "", 1.0, "",
                f"torch {t['torch'] * 1e3:.1f} ms, ring {t['ring'] * 1e3:.1f} ms")
            for name, _, t in bench_ddp.measure(2, 7 if quick else 41, 64)]


def run_rows(quick: bool) -> list[Row]:
    import bench_run_overhead as B

    res = B.measure(4 if quick else 12)  # ranks pinned: see bench_run_overhead.py
    plain = res[B.PLAIN][0]
    again = res[B.PLAIN_AGAIN]
    return [Row(f"step, {name} / plain torchrun", res[name][1], "", B.TARGET, "",
                f"{res[name][0]:.2f} vs {plain:.2f} ms/step")
            for name in (B.DOCTOR_RING, B.DOCTOR_TORCH)] + [
        Row("step, plain torchrun twice: |ratio - 1| (the control)", abs(again[1] - 1), "",
            B.CONTROL, "", f"ratio {again[1]:.3f}, {again[0]:.2f} vs {plain:.2f} ms/step")]


def _script(name: str, args: list[str], raw: list[str]) -> str:
    out = subprocess.run([sys.executable, str(HERE / name), *args], capture_output=True,
                         text=True, timeout=3600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    raw.append(f"--- {name}\n{out.stdout}{out.stderr[-2000:]}")
    return out.stdout


def _number_after(text: str, label: str) -> float | None:
    m = re.search(re.escape(label) + r"\s+(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


def record_rows(quick: bool, raw: list[str]) -> list[Row]:
    text = _script("bench_record.py", [], raw)
    cpu = _number_after(text, "whole recording of dist.all_reduce(t) (CPU)")
    wall = _number_after(text, "recording overhead per all_reduce")
    m = re.search(r"wall-time ratio (\d+\.\d+)", text)
    return [Row("recording one collective, thread CPU (bench_record)", cpu, " us", 3.0, ""),
            Row("recording one real 4 KB all_reduce, wall time added (world 1)", wall, " us",
                5.0, "", f"ratio {m.group(1)}" if m else "")]


def probe_rows(quick: bool, raw: list[str]) -> list[Row]:
    text = _script("bench_probes.py", ["--pairs", "7" if quick else "15"], raw)
    ratios = []
    marker = "with / without the probes"  # the step table's title
    table = text.split(marker, 1)[-1] if marker in text else ""
    for line in table.splitlines():
        nums = re.findall(r"\d+\.\d+", line)
        judged = {"ok", "MISS"} & set(line.split())  # a 0.5-1 ms step: its goal column
        if "MLP" in line and len(nums) >= 4 and judged:  # a loader x model row
            ratios.append(float(nums[2]))  # off ms, on ms, ratio, ratio by probe call
    value = max(ratios) if ratios else None
    note = "ratios " + ", ".join(f"{r:.3f}" for r in ratios) if ratios else ""
    spread = _number_after(text, "control (probes off on both sides) off by at most")
    return [Row("data probes, step ratio on 0.5-1 ms steps (worst loader)", value, "", 1.02,
                "", note),
            Row("data probes, probes off on both sides: |ratio - 1| (the control)", spread,
                "", 0.01, "")]


PARTS: dict[str, Callable[[bool, list[str]], list[Row]]] = {
    "ring": lambda q, raw: ring_rows(q),
    "run": lambda q, raw: run_rows(q),
    "ddp": lambda q, raw: ddp_rows(q),
    "record": record_rows,
    "probes": probe_rows,
}


def table(rows: list[Row]) -> Iterator[str]:
    head = ["figure", "measured", "goal", "met?", "load", "notes"]
    cells = [head] + [r.cells() for r in rows]
    width = [max(len(c[i]) for c in cells) for i in range(len(head) - 1)]
    yield "| " + " | ".join(head) + " |"
    yield "| " + " | ".join(["---"] + ["---:"] * 4 + ["---"]) + " |"
    for c in cells[1:]:
        yield "| " + " | ".join(c[i].ljust(width[i]) if i == 0 else c[i].rjust(width[i])
                                for i in range(len(head) - 1)) + f" | {c[-1]} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer pairs: a rough table fast")
    ap.add_argument("--only", nargs="+", choices=list(PARTS), default=list(PARTS))
    ap.add_argument("--raw", action="store_true", help="also print the scripts' own output")
    args = ap.parse_args(argv)
    print(f"ddpdoctor cost table ({os.cpu_count()} cores, load at start "
          f"{os.getloadavg()[0]:.2f}{', quick' if args.quick else ''})", flush=True)
    rows: list[Row] = []
    raw: list[str] = []
    for name in args.only:
        os.sync()  # the page cache a part left dirty is written back before the next one
        t0 = time.monotonic()
        rows += load_span(lambda: PARTS[name](args.quick, raw))
        print(f"  {name}: measured in {time.monotonic() - t0:.0f} s", file=sys.stderr,
              flush=True)
    print("\n".join(table(rows)))
    if args.raw:
        print("\n".join(raw))
    missed = [r for r in rows if r.met != "yes"]
    print(f"{len(rows) - len(missed)} of {len(rows)} figures meet their goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
