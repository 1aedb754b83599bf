"""Live progress of each rank: CPU time and I/O from /proc, and its trace advancing."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ddpdoctor.analysis.model import NS, JobView
from ddpdoctor.proc.table import descendants, scan

BUSY_SHARE = 0.05  # CPU time over wall time in a window above which a rank computes
WINDOW_S = 0.5  # a sampling window
IO_BYTES_PER_S = 32 << 10  # I/O (storage, or read/write calls) above this rate is work:
# far above a heartbeat's or a log line's few bytes, far below a checkpoint to slow storage
DESCENDANTS_S = 5.0  # between looks at a rank's child processes (DataLoader workers, writers)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_of(fields: list[bytes] | None) -> float | None:
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS if fields else None
    except (IndexError, ValueError):
        return None


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads) in seconds, or None if it is gone."""
    return _cpu_of(_stat_fields(pid))


def io_bytes(pid: int) -> int | None:
    """Bytes ``pid`` (all its threads) read and wrote so far: storage reads and writes and
    read/write calls (rchar, wchar, read_bytes, write_bytes of /proc/PID/io), or None when
    it is gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        name, _, value = line.partition(b":")
        if name in _IO_FIELDS:
            try:
                total += int(value)
            except ValueError:
                return None
    return total


def io_wait_switches(pid: int, state: bytes) -> int | None:
    """The main thread's voluntary context switches while it is in uninterruptible sleep
    (``state`` D, from its stat: waiting on storage), else None.  A count that rises
    between two looks is I/O completing bit by bit (a slow fsync), not a process stuck."""
    if state != b"D":
        return None
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
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
    io_bytes: int = 0  # of the rank and its descendants, at the start of the current window
    io_busy: bool = False  # I/O above IO_BYTES_PER_S in the last window
    io_waits: int | None = None  # voluntary switches in state D at the last look
    children: tuple[int, ...] = ()
    children_ns: int = 0
    seen_io: dict[int, int] = field(default_factory=dict)  # pid -> its bytes at the last look


class ProgressTracker:
    """Samples every rank's CPU time, I/O and trace count; cheap (two /proc reads a rank;
    its child processes looked up only while the rank shows no other progress)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, RankProgress] = {}

    def sample(self, ranks: Iterable[tuple[int, int, int]], now_ns: int | None = None) -> None:
        """``ranks``: (rank, pid, records written so far) of each live rank."""
        now = now_ns or time.time_ns()
        table: dict[int, Any] | None = None
        for rank, pid, records in ranks:
            p = self.by_pid.get(pid)
            stat = _stat_fields(pid)
            cpu = _cpu_of(stat)
            if p is None:
                p = self.by_pid[pid] = RankProgress(rank, cpu or 0.0, cpu or 0.0, now,
                                                    records, now)
                p.io_bytes = self._io_of(p, pid)[0]
                continue
            if records != p.records:
                p.records, p.progress_ns = records, now
            if cpu is None:
                continue
            p.cpu_s = cpu
            span = (now - p.window_ns) / NS
            if span < WINDOW_S:
                continue
            p.cpu_busy = (cpu - p.window_cpu_s) >= BUSY_SHARE * span
            quiet = not p.cpu_busy and p.progress_ns < p.window_ns
            if quiet and now - p.children_ns >= DESCENDANTS_S * NS:
                table = scan() if table is None else table  # one scan for every rank
                p.children, p.children_ns = tuple(sorted(descendants(table, [pid]))), now
            io, new = self._io_of(p, pid)
            p.io_busy = io - new - p.io_bytes >= IO_BYTES_PER_S * span
            waits = io_wait_switches(pid, stat[0] if stat else b"")
            in_io = waits is not None and p.io_waits is not None and waits > p.io_waits
            p.io_waits = waits
            if p.cpu_busy or p.io_busy or in_io:
                p.progress_ns = now
            p.window_cpu_s, p.window_ns, p.io_bytes = cpu, now, io

    @staticmethod
    def _io_of(p: RankProgress, pid: int) -> tuple[int, int]:
        """(bytes of the rank and its known children so far, the part of them that children
        seen for the first time bring: their past, not this window's work)."""
        new = 0
        for proc in (pid,) + p.children:
            got = io_bytes(proc)
            if got is None:
                continue
            if proc not in p.seen_io and proc != pid:
                new += got
            p.seen_io[proc] = got
        p.seen_io = {q: n for q, n in p.seen_io.items() if q == pid or q in p.children}
        return sum(p.seen_io.values()), new

    def apply(self, job: JobView) -> None:
        """Fill each RankRun's progress_ns and cpu_busy (interfaces: live progress facts)."""
        for run in job.ranks.values():
            p = self.by_pid.get(run.pid)
            if p is not None:
                run.progress_ns, run.cpu_busy = p.progress_ns, p.cpu_busy

    def event(self) -> dict[str, Any]:
        """The ``progress`` event of supervisor.jsonl: {"<rank>": {progress_ns, cpu_busy,
        cpu_s, io_busy}}."""
        return {str(p.rank): {"progress_ns": p.progress_ns, "cpu_busy": p.cpu_busy,
                              "cpu_s": round(p.cpu_s, 3), "io_busy": p.io_busy}
                for p in self.by_pid.values()}
