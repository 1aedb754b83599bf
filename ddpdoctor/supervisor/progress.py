"""Live progress of each rank: CPU time from /proc, and its trace advancing."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable

from ddpdoctor.analysis.model import NS, JobView

BUSY_SHARE = 0.05  # CPU time over wall time in a window above which a rank computes
WINDOW_S = 0.5  # a sampling window
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads) in seconds, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class RankProgress:
    """What the supervisor knows of one process's progress."""

    rank: int
    cpu_s: float = 0.0
    window_cpu_s: float = 0.0  # CPU time at the start of the current window
    window_ns: int = 0
    records: int = -1
    progress_ns: int = 0
    cpu_busy: bool = False


class ProgressTracker:
    """Samples every rank's CPU time and trace count; cheap (one /proc read per rank)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, RankProgress] = {}

    def sample(self, ranks: Iterable[tuple[int, int, int]], now_ns: int | None = None) -> None:
        """``ranks``: (rank, pid, records written so far) of each live rank."""
        now = now_ns or time.time_ns()
        for rank, pid, records in ranks:
            p = self.by_pid.get(pid)
            cpu = cpu_seconds(pid)
            if p is None:
                p = self.by_pid[pid] = RankProgress(rank, cpu or 0.0, cpu or 0.0, now,
                                                    records, now)
                continue
            if records != p.records:
                p.records, p.progress_ns = records, now
            if cpu is None:
                continue
            p.cpu_s = cpu
            span = (now - p.window_ns) / NS
            if span >= WINDOW_S:
                p.cpu_busy = (cpu - p.window_cpu_s) >= BUSY_SHARE * span
                if p.cpu_busy:
                    p.progress_ns = now
                p.window_cpu_s, p.window_ns = cpu, now

    def apply(self, job: JobView) -> None:
        """Fill each RankRun's progress_ns and cpu_busy (interfaces: live progress facts)."""
        for run in job.ranks.values():
            p = self.by_pid.get(run.pid)
            if p is not None:
                run.progress_ns, run.cpu_busy = p.progress_ns, p.cpu_busy

    def event(self) -> dict[str, Any]:
        """The ``progress`` event of supervisor.jsonl: {"<rank>": {progress_ns, cpu_busy, cpu_s}}."""
        return {str(p.rank): {"progress_ns": p.progress_ns, "cpu_busy": p.cpu_busy,
                              "cpu_s": round(p.cpu_s, 3)} for p in self.by_pid.values()}
