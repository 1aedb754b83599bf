"""Where `ddpdoctor run --ddp torch` spends its time, each part measured inside one job.

    python bench/bench_ddp_torch_parts.py [--launches 3] [--steps 1200] [--window 0.5]

The table's `--ddp torch` row compares whole launches, whose median step moves by up to
15% from one launch to the next on a 2-core VM; these parts alternate inside each job:

- buckets: one job under `ddpdoctor run --ddp torch` steps four DDPs of the 3x512 MLP in
  turn: torch's own reducer on torch's group (unpatched), the DDP as `--ddp torch` builds
  it (torch's reducer on torch's group, the buckets left to the flight recorder), the
  reducer on a group that only forwards each bucket from Python (the call into Python, the
  future waited at the end of backward), and the reducer on ddpdoctor's recording group
  (`--ddp torch` before 2026-11-26's evening).  Main-thread CPU a step
  (median) and wall a step (median ratio to torch's own).
- supervisor: one DDP steps for ~50 s under `ddpdoctor run --ddp torch` while this script
  stops (SIGSTOP) and continues the supervisor in turn every ``--window`` seconds; the
  ratio of the median step while it runs to the median while it is stopped.

Each part runs ``--launches`` jobs and prints each launch and the median over them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

JOB = Path(__file__).resolve().parent / "jobs" / "ddp_torch_parts.py"


def _doctor(run_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "ddpdoctor.cli", "run", "--ddp", "torch", "--run-dir",
            str(run_dir), "--nproc-per-node", "2", str(JOB)]
    return subprocess.Popen(argv, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def buckets(scratch: Path, i: int, steps: int) -> dict[str, dict[str, float]]:
    proc = _doctor(scratch / f"buckets-{i}", {"BENCH_STEPS": str(steps)})
    out, _ = proc.communicate(timeout=1800)
    for line in out.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise SystemExit(f"no BENCH line from the buckets job:\n{out[-2000:]}")


def supervisor(scratch: Path, i: int, window: float) -> tuple[float, int, int]:
    """(median step while the supervisor runs / while it is stopped, steps of each)."""
    log = scratch / f"steps-{i}.json"
    proc = _doctor(scratch / f"supervisor-{i}", {"BENCH_STEPLOG": str(log),
                                                 "BENCH_STEPS": "7000"})
    turns: list[tuple[float, str]] = []
    done = threading.Event()

    def toggle() -> None:
        time.sleep(6.0)  # start-up: imports, rendezvous
        state = "run"
        while not done.is_set():
            try:
                os.kill(proc.pid, signal.SIGSTOP if state == "run" else signal.SIGCONT)
            except ProcessLookupError:
                break
            state = "stop" if state == "run" else "run"
            turns.append((time.time(), state))
            done.wait(window)
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    try:
        while True:  # the job's end: its step log appears (the supervisor may be stopped)
            if log.exists() or proc.poll() is not None:
                break
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        done.set()
        thread.join()
        proc.communicate(timeout=600)
    if not log.exists():
        raise SystemExit("the supervisor job wrote no step log")
    steps = json.loads(log.read_text())
    by_state: dict[str, list[float]] = {"run": [], "stop": []}
    for t, d in steps:
        k = next((j for j in range(len(turns) - 1)
                  if turns[j][0] + 0.05 <= t and t + d <= turns[j + 1][0]), None)
        if k is not None:  # wholly inside one window, not at its start
            by_state[turns[k][1]].append(d)
    if not by_state["run"] or not by_state["stop"]:
        raise SystemExit("no step fell inside a window: is --window too short?")
    return (statistics.median(by_state["run"]) / statistics.median(by_state["stop"]),
            len(by_state["run"]), len(by_state["stop"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1200, help="steps of each DDP (buckets)")
    ap.add_argument("--window", type=float, default=0.5, help="seconds (supervisor)")
    ap.add_argument("--buckets-only", action="store_true", help="skip the supervisor part")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="ddpdoctor-bench-parts-"))
    try:
        print(f"`ddpdoctor run --ddp torch`, 2 ranks, 3x512 MLP ({os.cpu_count()} cores, "
              f"load {os.getloadavg()[0]:.2f})")
        print("buckets: main-thread CPU a step (median), and more than torch's own; "
              "wall a step / torch's own")
        extra: dict[str, list[float]] = {"flight recorder": [], "forwarding": [],
                                         "recording": []}
        for i in range(args.launches):
            got = buckets(scratch, i, args.steps)
            base = got["torch"]
            cells = []
            for k in extra:
                extra[k].append(got[k]["cpu_us"] - base["cpu_us"])
                cells.append(f"{k} {got[k]['cpu_us']:.0f} us ({extra[k][-1]:+.0f}), wall "
                             f"{got[k]['wall_ms'] / base['wall_ms']:.3f}")
            print(f"  launch {i + 1}: torch {base['cpu_us']:.0f} us; " + "; ".join(cells))
        fr, fwd, rec = (statistics.median(extra[k]) for k in extra)
        print(f"  median: --ddp torch (the recording group, every bucket recorded as "
              f"issued) {rec:+.0f} us a step: the call into Python and the future {fwd:+.0f} "
              f"us, the records {rec - fwd:+.0f} us more; buckets left to the flight recorder "
              f"(DDPDOCTOR_DDP_TORCH_BUCKETS=flight_recorder) {fr:+.0f} us")
        if args.buckets_only:
            return 0
        print(f"supervisor: median step while it runs / while stopped ({args.window:g} s "
              "windows)")
        ratios = []
        for i in range(args.launches):
            ratio, n_run, n_stop = supervisor(scratch, i, args.window)
            ratios.append(ratio)
            print(f"  launch {i + 1}: {ratio:.4f} ({n_run} / {n_stop} steps)")
        print(f"  median: {statistics.median(ratios):.4f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
