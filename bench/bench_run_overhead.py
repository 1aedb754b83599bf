"""Step time of a small torch-DDP job with and without `ddpdoctor run --ddp torch`
(and with the default ring DDP), measured in alternating runs of the same session.

    python bench/bench_run_overhead.py [--pairs 7] [--pin]

Each pair runs the three configurations once (the order rotates from pair to pair);
a configuration's ratio is the median over the pairs of its step time / the plain
torchrun step time of the same pair, so that load from other jobs, which changes
over minutes, hits both sides of every ratio alike.

``--pin`` runs every rank of every configuration on a core of its own (the job pins its
main thread, and so gloo's threads and ddpdoctor's communication thread, to core
LOCAL_RANK; ddpdoctor's supervisor is not pinned).  Unpinned, where the scheduler happens
to put the ranks' threads at start moves the median step of the same command by up to 17%
from one launch to the next on a 2-core VM (6.1-7.2 ms over six plain launches); pinned,
six plain launches spanned 2.3%.  Pinning is not the default: it also changes what is
compared (the ring's communication thread then shares its rank's core with backward).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = Path(__file__).resolve().parent / "jobs" / "ddp_steps.py"
PAIRS = int(os.environ.get("BENCH_PAIRS", "7"))
STEPS = 250  # a job's steps (after 10 warm-up ones): its median is of 1-2 s of training
NPROC = 2
PLAIN = "torch DDP, plain torchrun"
DOCTOR_TORCH = "ddpdoctor run --ddp torch"
DOCTOR_RING = "ddpdoctor run (ring DDP)"
TARGET = 1.02


def step_ms(argv: list[str], pin: bool = False) -> float:
    env = {"BENCH_STEPS": str(STEPS), **os.environ, "OMP_NUM_THREADS": "1",
           "BENCH_PIN_RANKS": "1" if pin else "0"}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("BENCH "):
            return float(json.loads(line[6:])["median_ms"])
    raise SystemExit(f"no BENCH line from {' '.join(argv[:6])}...:\n{out.stderr[-2000:]}")


def measure(pairs: int = PAIRS, pin: bool = False) -> dict[str, tuple[float, float]]:
    """``{configuration: (median ms/step, median ratio to plain torchrun)}``; ``pin``: each
    rank on a core of its own."""
    plain = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC),
             str(JOB)]
    runs = Path(tempfile.mkdtemp(prefix="ddpdoctor-bench-"))

    def doctor(mode: str, i: int) -> list[str]:
        return [sys.executable, "-m", "ddpdoctor.cli", "run", "--ddp", mode, "--run-dir",
                str(runs / f"{mode}-{i}"), "--nproc-per-node", str(NPROC), str(JOB)]

    names = [PLAIN, DOCTOR_TORCH, DOCTOR_RING]
    times: dict[str, list[float]] = {k: [] for k in names}
    try:
        for i in range(pairs):
            argvs = {PLAIN: plain, DOCTOR_TORCH: doctor("torch", i),
                     DOCTOR_RING: doctor("ring", i)}
            for name in names[i % 3:] + names[:i % 3]:
                times[name].append(step_ms(argvs[name], pin))
                for job_dir in runs.iterdir():  # each job's traces: ~20 MB
                    shutil.rmtree(job_dir, ignore_errors=True)
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    return {k: (statistics.median(v),
                statistics.median(t / p for t, p in zip(v, times[PLAIN])))
            for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=PAIRS)
    ap.add_argument("--pin", action="store_true",
                    help="each rank on a core of its own (steadier from launch to launch)")
    args = ap.parse_args(argv)
    results = measure(args.pairs, pin=args.pin)
    ranks = "a core each" if args.pin else "unpinned"
    print(f"{f'configuration (2 ranks, {ranks}, 3-layer 512-wide MLP, batch 64)':58} "
          f"{'ms/step':>8} {'ratio':>6}")
    for name, (med, ratio) in results.items():
        print(f"{name:58} {med:8.2f} {ratio:6.3f}")
    for name in (DOCTOR_TORCH, DOCTOR_RING):
        ratio = results[name][1]
        print(f"target: {name} ratio <= {TARGET} -> {'met' if ratio <= TARGET else 'NOT met'} "
              f"({ratio:.3f}; median of {args.pairs} alternating runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
