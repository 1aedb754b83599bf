"""Progress of a rank's process tree, from /proc: the one rule of what counts as progress.

A rank makes progress when it, or a process it waits on, works: the rank's process and its
descendants (DataLoader workers, a subprocess it runs) using CPU, the tree reading or
writing, the rank's storage I/O completing bit by bit, or a chosen, bounded wait:

- the rank's main thread in a timed sleep that wakes between looks (``time.sleep`` between
  retries of a slow save: a program that looks again; one sleep with no wake-up for the
  whole hang timeout is read as stuck, as before);
- a worker forked from the rank (a DataLoader worker in a slow ``__getitem__``) in a timed
  sleep;
- a command the rank waits on (its main thread in ``wait4``/``poll``: ``subprocess.run``)
  in a timed sleep.

A process blocked on a lock, a queue or a peer is not counted, nor a background child
sleeping while the rank does something else.  A rank that retries forever is read like one
that computes forever: a straggler, said once, never a hang.
The supervisor (``supervisor/progress.py``) and the rank-side watch that runs when the
supervisor is gone (``runtime/supervisor_watch.py``) both decide with ``made_progress``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

BUSY_SHARE = 0.05  # CPU time over wall time in a window above which a tree computes
IO_BYTES_PER_S = 32 << 10  # I/O (storage, or read/write calls) above this rate is work:
# far above a heartbeat's or a log line's few bytes, far below a checkpoint to slow storage
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")
# syscall numbers of a timed sleep (time.sleep: clock_nanosleep; older libcs: nanosleep)
TIMED_SLEEPS = {"x86_64": (35, 230), "aarch64": (101, 115)}
_SLEEP_WCHANS = ("hrtimer_nanosleep", "do_nanosleep")
# a wait on a child: wait4, waitid (subprocess.run); the poll family, when the rank reads
# a pipe the child writes (subprocess.run(capture_output=True)'s communicate)
CHILD_WAITS = {"x86_64": (61, 247), "aarch64": (260, 95)}
PIPE_WAITS = {"x86_64": (7, 271, 23, 270), "aarch64": (73, 72)}
_CHILD_WAIT_WCHANS = ("do_wait",)
_PIPE_WAIT_WCHANS = ("do_sys_poll", "do_select", "poll_schedule_timeout")


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_of(fields: list[bytes] | None) -> float | None:
    """utime + stime in seconds from ``stat_fields``, or None."""
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS if fields else None
    except (IndexError, ValueError):
        return None


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (all its threads) in seconds, or None if it is gone."""
    return cpu_of(stat_fields(pid))


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
    return main_switches(pid) if state == b"D" else None


def _main_syscall(pid: int) -> int | None:
    """The syscall ``pid``'s main thread is blocked in (/proc/PID/syscall), or None: running,
    gone, or not ours to read."""
    try:
        with open(f"/proc/{pid}/syscall", "rb") as f:
            first = f.read().split(maxsplit=1)[:1]
        return int(first[0]) if first and first[0].lstrip(b"-").isdigit() else None
    except (OSError, ValueError):
        return None


def _main_wchan(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/wchan", "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _blocked_in(pid: int, numbers: dict[str, tuple[int, ...]], wchans: tuple[str, ...]) -> bool:
    call = _main_syscall(pid)
    if call is not None:
        return call in numbers.get(os.uname().machine, ())
    return _main_wchan(pid) in wchans  # /proc/PID/syscall is not ours: where it sleeps


def in_timed_sleep(pid: int) -> bool:
    """Is ``pid``'s main thread in a timed sleep (nanosleep, clock_nanosleep)?"""
    return _blocked_in(pid, TIMED_SLEEPS, _SLEEP_WCHANS)


def waits_on_child(pid: int, child: int) -> bool:
    """Is ``pid``'s main thread waiting on a child (wait4, waitid), or polling a pipe whose
    read end it holds and ``child`` writes (not a pipe they merely share, as a stdout the
    child inherited)?"""
    if _blocked_in(pid, CHILD_WAITS, _CHILD_WAIT_WCHANS):
        return True
    if not _blocked_in(pid, PIPE_WAITS, _PIPE_WAIT_WCHANS):
        return False
    reads = _pipes(pid, os.O_RDONLY)
    return bool(reads) and bool(reads & _pipes(child, os.O_WRONLY))


def _pipes(pid: int, mode: int) -> set[str]:
    """The pipes ``pid`` holds open for ``mode`` (os.O_RDONLY or os.O_WRONLY)."""
    out: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if not target.startswith("pipe:"):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                flags = next((int(line.split()[1], 8) for line in f
                              if line.startswith(b"flags:")), None)
        except (OSError, ValueError, IndexError):
            continue
        if flags is not None and flags & os.O_ACCMODE == mode:
            out.add(target)
    return out


def main_switches(pid: int) -> int | None:
    """The voluntary context switches of ``pid``'s main thread: one at least each time it
    sleeps again."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


@dataclass(frozen=True)
class TreeLook:
    """What a rank's process tree did since the previous look."""

    span_s: float  # wall time since the previous look
    cpu_s: float  # the rank's own CPU time in the span
    children_cpu_s: float  # its descendants' (those seen at both looks)
    io_bytes: int  # the tree's reads and writes in the span
    in_io: bool  # the rank's storage I/O completed bit by bit (state D, switches rising)
    timed_sleep: bool  # a chosen, bounded wait: the rank retrying in timed sleeps, or a
    # worker of it or a command it waits on in a timed sleep (see the module docstring)

    @property
    def cpu_busy(self) -> bool:
        """The rank's own process computes."""
        return self.cpu_s >= BUSY_SHARE * self.span_s


def made_progress(look: TreeLook) -> bool:
    """The one progress rule: the rank, or a process it waits on, worked in the span:
    CPU of the tree, its I/O, storage I/O completing, or a chosen, bounded wait."""
    return (look.cpu_s + look.children_cpu_s >= BUSY_SHARE * look.span_s
            or look.io_bytes >= IO_BYTES_PER_S * look.span_s
            or look.in_io or look.timed_sleep)


@dataclass
class TreeProgress:
    """One rank's process tree from look to look (``look``), its descendants as last told
    (``set_children``): a child seen for the first time brings its past, which is not
    counted as the span's work."""

    pid: int
    children: tuple[int, ...] = ()
    cpu_s: float = 0.0
    io_waits: int | None = None
    sleeps: int | None = None  # the main thread's switches when last seen in a timed sleep
    seen_cpu: dict[int, float] = field(default_factory=dict)
    seen_io: dict[int, int] = field(default_factory=dict)
    last_ns: int | None = None

    def set_children(self, children: Iterable[int]) -> None:
        self.children = tuple(sorted(children))

    def look(self, now_ns: int) -> TreeLook | None:
        """The tree's work since the previous look; None at the first look (it sets the
        baseline), or when the rank is gone.  The tree's sleep is checked only when it
        shows no other progress (a few /proc reads a process)."""
        stat = stat_fields(self.pid)
        cpu = cpu_of(stat)
        if cpu is None:
            return None
        before, self.last_ns = self.last_ns, now_ns
        own, self.cpu_s = cpu - self.cpu_s, cpu
        child_cpu, io = self._children_delta()
        waits = io_wait_switches(self.pid, stat[0] if stat else b"")
        in_io = waits is not None and self.io_waits is not None and waits > self.io_waits
        self.io_waits = waits
        if before is None:
            return None
        got = TreeLook(max((now_ns - before) / 1e9, 1e-9), own, child_cpu, io, in_io, False)
        if not made_progress(got) and self._sleeping():
            got = TreeLook(got.span_s, own, child_cpu, io, in_io, True)
        return got

    def _children_delta(self) -> tuple[float, int]:
        """(CPU seconds, I/O bytes) of the rank and its children since the previous look;
        the rank's own I/O counts, its own CPU is ``look``'s."""
        cpu_delta, io_delta = 0.0, 0
        cpu_now: dict[int, float] = {}
        io_now: dict[int, int] = {}
        for proc in (self.pid,) + self.children:
            got_io = io_bytes(proc)
            if got_io is not None:
                io_now[proc] = got_io
                if proc in self.seen_io:
                    io_delta += max(0, got_io - self.seen_io[proc])
            if proc == self.pid:
                continue
            got_cpu = cpu_seconds(proc)
            if got_cpu is not None:
                cpu_now[proc] = got_cpu
                if proc in self.seen_cpu:
                    cpu_delta += max(0.0, got_cpu - self.seen_cpu[proc])
        self.seen_cpu, self.seen_io = cpu_now, io_now
        return cpu_delta, io_delta

    def _sleeping(self) -> bool:
        """A chosen, bounded wait (the module docstring): the rank's main thread woke from a
        timed sleep and slept again since the last look; a worker forked from it in a timed
        sleep; or the rank waits on a child that is in one."""
        woke = False
        if in_timed_sleep(self.pid):
            switches = main_switches(self.pid)
            woke = None not in (switches, self.sleeps) and switches > self.sleeps
            self.sleeps = switches
        if woke or not self.children:
            return woke
        own = cmdline(self.pid)
        return any(in_timed_sleep(child) and
                   (cmdline(child) == own or waits_on_child(self.pid, child))
                   for child in self.children)
