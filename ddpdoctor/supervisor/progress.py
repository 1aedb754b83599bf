"""Live progress of each rank: its process tree's work (proc/progress.py's one rule) and
its trace advancing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ddpdoctor.analysis.model import NS, JobView
from ddpdoctor.proc.progress import (BUSY_SHARE, IO_BYTES_PER_S, TreeProgress,
                                     cpu_seconds, made_progress)
from ddpdoctor.proc.table import descendants, scan

__all__ = ["ProgressTracker", "RankProgress", "cpu_seconds"]

WINDOW_S = 0.5  # a sampling window
DESCENDANTS_S = 5.0  # between looks at a rank's child processes (DataLoader workers, writers)


@dataclass
class RankProgress:
    """What the supervisor knows of one rank's progress: its process tree's (``tree``),
    judged by the one rule (``proc.progress.made_progress``), and its trace advancing."""

    rank: int
    cpu_s: float = 0.0
    window_ns: int = 0
    records: int = -1
    progress_ns: int = 0
    cpu_busy: bool = False  # the rank's own process computes
    io_busy: bool = False  # the tree's I/O above IO_BYTES_PER_S in the last window
    waits_busy: bool = False  # its descendants computed, or it or one of them sleeps timed
    children: tuple[int, ...] = ()
    children_ns: int = 0
    tree: TreeProgress | None = field(default=None, repr=False)


class ProgressTracker:
    """Samples every rank's process tree and trace count; cheap (a few /proc reads a rank;
    its child processes looked up only while the rank itself shows no progress)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, RankProgress] = {}

    def sample(self, ranks: Iterable[tuple[int, int, int]], now_ns: int | None = None) -> None:
        """``ranks``: (rank, pid, records written so far) of each live rank."""
        now = now_ns or time.time_ns()
        table: dict[int, Any] | None = None
        for rank, pid, records in ranks:
            p = self.by_pid.get(pid)
            if p is None:
                p = self.by_pid[pid] = RankProgress(rank, window_ns=now, records=records,
                                                    progress_ns=now, tree=TreeProgress(pid))
                p.tree.look(now)
                p.cpu_s = p.tree.cpu_s
                continue
            if records != p.records:
                p.records, p.progress_ns = records, now
            if p.tree is None or (now - p.window_ns) / NS < WINDOW_S:
                continue
            quiet = not p.cpu_busy and p.progress_ns < p.window_ns
            if quiet and now - p.children_ns >= DESCENDANTS_S * NS:
                table = scan() if table is None else table  # one scan for every rank
                p.children, p.children_ns = tuple(sorted(descendants(table, [pid]))), now
                p.tree.set_children(p.children)
            look = p.tree.look(now)
            if look is None:
                continue
            p.window_ns, p.cpu_s = now, p.tree.cpu_s
            p.cpu_busy = look.cpu_busy
            p.io_busy = look.io_bytes >= IO_BYTES_PER_S * look.span_s
            p.waits_busy = look.timed_sleep or \
                look.children_cpu_s >= BUSY_SHARE * look.span_s
            if made_progress(look):
                p.progress_ns = now

    def apply(self, job: JobView) -> None:
        """Fill each RankRun's progress_ns and cpu_busy (interfaces: live progress facts)."""
        for run in job.ranks.values():
            p = self.by_pid.get(run.pid)
            if p is not None:
                run.progress_ns, run.cpu_busy = p.progress_ns, p.cpu_busy

    def event(self) -> dict[str, Any]:
        """The ``progress`` event of supervisor.jsonl: {"<rank>": {progress_ns, cpu_busy,
        cpu_s, io_busy, waits_busy}}."""
        return {str(p.rank): {"progress_ns": p.progress_ns, "cpu_busy": p.cpu_busy,
                              "cpu_s": round(p.cpu_s, 3), "io_busy": p.io_busy,
                              "waits_busy": p.waits_busy}
                for p in self.by_pid.values()}
