"""Step time of a small torch-DDP job with and without `ddpdoctor run --ddp torch`
(and with the default ring DDP), measured in alternating runs of the same session."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

JOB = Path(__file__).resolve().parent / "jobs" / "ddp_steps.py"
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
NPROC = 2


def step_ms(argv: list[str]) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in out.stdout.splitlines():
        if line.startswith("BENCH "):
            return float(json.loads(line[6:])["median_ms"])
    raise SystemExit(f"no BENCH line from {' '.join(argv[:6])}...:\n{out.stderr[-2000:]}")


def main() -> int:
    plain = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC),
             str(JOB)]
    runs = Path(tempfile.mkdtemp(prefix="ddpdoctor-bench-"))

    def doctor(mode: str, i: int) -> list[str]:
        return [sys.executable, "-m", "ddpdoctor.cli", "run", "--ddp", mode, "--run-dir",
                str(runs / f"{mode}-{i}"), "--nproc-per-node", str(NPROC), str(JOB)]

    results: dict[str, list[float]] = {"torch DDP, plain torchrun": [],
                                       "ddpdoctor run --ddp torch": [],
                                       "ddpdoctor run (ring DDP)": []}
    for i in range(PAIRS):
        results["torch DDP, plain torchrun"].append(step_ms(plain))
        results["ddpdoctor run --ddp torch"].append(step_ms(doctor("torch", i)))
        results["ddpdoctor run (ring DDP)"].append(step_ms(doctor("ring", i)))
    ref = statistics.median(results["torch DDP, plain torchrun"])
    print(f"{'configuration (2 ranks, 3-layer 512-wide MLP, batch 64)':58} {'ms/step':>8} "
          f"{'ratio':>6}")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name:58} {med:8.2f} {med / ref:6.3f}")
    ratio = statistics.median(results["ddpdoctor run --ddp torch"]) / ref
    print(f"target: --ddp torch ratio <= 1.03 -> {'met' if ratio <= 1.03 else 'NOT met'} "
          f"({ratio:.3f}; medians of {PAIRS} alternating runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
