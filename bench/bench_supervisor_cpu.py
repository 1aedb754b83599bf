"""The supervisor's CPU cost: `ddpdoctor run` watching 8 real ranks that do a few hundred
small collectives a second for ~20 s must use at most 2% of one core.

    python bench/bench_supervisor_cpu.py                  # 8 ranks, 20 s, the budget check
    python bench/bench_supervisor_cpu.py --profile        # + where the time goes (py-spy)

The ddpdoctor process's own CPU (utime + stime of /proc/<pid>/stat, children excluded)
is sampled while the job runs.  Reported: the whole run (start-up and report included)
and the steady state (from the first collective to the last), each as % of one core.
Exits 1 when the steady state exceeds the budget.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.trace.reader import TraceError, read_header  # noqa: E402

BUDGET_PCT = 2.0
TICK = os.sysconf("SC_CLK_TCK")

JOB = '''
import os, time, datetime
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
count, pause = int(os.environ["BENCH_COUNT"]), float(os.environ["BENCH_PAUSE"])
t = torch.ones(4)
dist.barrier()
n = 0
for n in range(1, count + 1):  # the same number on every rank (a time limit would not be)
    dist.all_reduce(t)
    if pause:
        time.sleep(pause)
dist.barrier()
if dist.get_rank() == 0:
    print(f"collectives per rank: {n}", flush=True)
dist.destroy_process_group()
'''


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` itself (not its children), in seconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def total_collectives(run_dir: Path) -> int:
    n = 0
    for path in (run_dir / "traces").glob("pid-*.ring"):
        try:
            with open(path, "rb") as f:
                h = read_header(f.read(4096), path)
        except (OSError, TraceError):
            continue
        if h.rank >= 0:
            n += h.count
    return n


def first_record_seen(run_dir: Path) -> bool:
    return total_collectives(run_dir) > 0


def profile(pid: int, seconds: float, out: Path) -> None:
    """py-spy record the supervisor for ``seconds``; print its hottest functions."""
    exe = shutil.which("py-spy")
    if exe is None:
        print("py-spy not found: no profile")
        return
    subprocess.run([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                    "--rate", "200", "--format", "raw", "--output", str(out), "--nonblocking"],
                   capture_output=True, check=False)
    self_time: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    samples = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        samples += int(count)
        self_time[frames[-1]] += int(count)
        for fr in set(frames):
            total[fr] += int(count)
    print(f"py-spy: {samples} samples of the supervisor (active only, idle excluded)")
    print("  hottest (self):")
    for fr, c in self_time.most_common(12):
        print(f"    {100 * c / max(samples, 1):5.1f}%  {fr}")
    print("  inclusive:")
    for fr, c in total.most_common(20):
        print(f"    {100 * c / max(samples, 1):5.1f}%  {fr}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0,
                   help="the intended duration: collectives = seconds x rate")
    p.add_argument("--rate", type=float, default=150.0,
                   help="collectives a second each rank aims at (default 150)")
    p.add_argument("--pause", type=float, default=0.002,
                   help="sleep between collectives on each rank (default 0.002 s; the "
                   "rate is what the machine then gives)")
    p.add_argument("--profile", action="store_true", help="py-spy record the supervisor")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-cpu-"))
    job = tmp / "job.py"
    job.write_text(JOB)
    run_dir = tmp / "run"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    count = int(args.seconds * args.rate)
    env = {**os.environ, "BENCH_COUNT": str(count), "BENCH_PAUSE": str(args.pause)}
    argv = [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(run_dir),
            "--nproc-per-node", str(args.ranks), "--master-port", str(port),
            "--ddp", "torch", str(job)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    steady_start = steady_end = None
    cpu_start = cpu_end = last = 0.0
    profiled = False
    while proc.poll() is None:
        now_cpu = cpu_seconds(proc.pid)
        if now_cpu is not None:
            last = now_cpu
        if steady_start is None and first_record_seen(run_dir):
            steady_start, cpu_start = time.monotonic(), last
        if steady_start is not None and total_collectives(run_dir) < 0.95 * count * args.ranks:
            steady_end, cpu_end = time.monotonic(), last
            if args.profile and not profiled and time.monotonic() - steady_start > 2:
                profiled = True
                profile(proc.pid, min(10, args.seconds / 2), tmp / "profile.txt")
        time.sleep(0.25)
    wall = time.monotonic() - t0
    out, err = proc.communicate()
    collectives = total_collectives(run_dir)
    try:
        if proc.returncode != 0:
            print(err[-3000:], file=sys.stderr)
            print(f"the job failed (exit {proc.returncode})")
            return 1
        print(out.strip())
        steady = (steady_end or 0) - (steady_start or 0)
        steady_pct = 100 * (cpu_end - cpu_start) / steady if steady > 0 else float("nan")
        print(f"{args.ranks} ranks, {collectives:,} records in {wall:.1f} s; steady state "
              f"{steady:.1f} s at ~{0.95 * count * args.ranks / max(steady, 1e-9):,.0f} "
              "records/s over all ranks")
        print(f"supervisor CPU, whole run: {last:.2f} s of {wall:.1f} s = "
              f"{100 * last / wall:.2f}% of a core (start-up and report included)")
        print(f"supervisor CPU, steady state: {cpu_end - cpu_start:.2f} s of {steady:.1f} s = "
              f"{steady_pct:.2f}% of a core (budget {BUDGET_PCT}%)")
        ok = steady_pct <= BUDGET_PCT
        print("budget: " + ("OK" if ok else "EXCEEDED"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
