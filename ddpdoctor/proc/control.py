"""Start the job in a session of its own, and stop every process of it (tree, not name)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import IO, Iterable

from ddpdoctor.errors import UserError
from ddpdoctor.proc.table import ProcInfo, descendants, proc_info, scan

STOP_GRACE_S = 2.5  # between the polite signal and SIGKILL
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts: a process of the job
    whose parent dies is re-parented here, not to init, so it stays findable.  False when
    the kernel (or libc) cannot do it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl
        return False


def start_job(argv: list[str], env: dict[str, str],
              output: IO[bytes] | None = None) -> subprocess.Popen:
    """Start the job as the leader of a new session, so one signal reaches all of it."""
    try:
        return subprocess.Popen(argv, env=env, start_new_session=True,
                                stdout=output, stderr=subprocess.STDOUT if output else None)
    except OSError as e:
        raise UserError(f"cannot start {argv[0]}: {e.strerror or e}") from None


@dataclass
class JobTree:
    """Every process the job started, as the OS tells: its session, the launcher's
    descendants (by parent pid), and each such process seen while it ran (kept with its
    start time, so a pid reused by someone else is never taken for the job's)."""

    launcher: int
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time (clock ticks)

    def _current(self) -> dict[int, ProcInfo]:
        table = scan()
        me = os.getpid()
        own_session = table[me].session if me in table else -1
        # the job's session, and orphans of it that left the session and were re-parented
        # to this process (the child subreaper)
        members = {pid: p for pid, p in table.items() if pid != me and (
            p.session == self.launcher or (p.ppid == me and p.session != own_session))}
        roots = set(members) | {self.launcher} | {pid for pid in self.seen if pid in table}
        for pid in descendants(table, roots):
            if pid != me:
                members[pid] = table[pid]
        return members

    def snapshot(self) -> list[int]:
        """Look again; remember every process of the job; returns those alive now."""
        current = self._current()
        for pid, p in current.items():
            self.seen[pid] = p.start
        return self.alive()

    def alive(self) -> list[int]:
        """The job's processes still running (zombies count as gone)."""
        out = []
        for pid, start in self.seen.items():
            p = proc_info(pid)
            if p is not None and p.start == start and p.state not in ("Z", "X"):
                out.append(pid)
        return sorted(out)


@dataclass(frozen=True)
class StopResult:
    """What a stop did: the signal sent first, every pid it reached, those SIGKILLed."""

    exit_code: int
    signal: str
    pids: tuple[int, ...]
    killed: tuple[int, ...]

    def as_dict(self, reason: str) -> dict[str, object]:
        return {"reason": reason, "signal": self.signal, "pids": list(self.pids),
                "sigkill": list(self.killed)}


def _signal_all(session: int, pids: Iterable[int], sig: int) -> None:
    try:
        os.killpg(session, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # this one is gone already


def _reap(pids: Iterable[int], launcher: int) -> None:
    """Collect the exit status of orphans re-parented to us (no zombies left behind)."""
    for pid in pids:
        if pid == launcher:
            continue  # Popen collects its own child
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child: its own parent reaps it


def stop_job(proc: subprocess.Popen, tree: JobTree | None = None,
             extra_pids: Iterable[int] = (), grace: float = STOP_GRACE_S,
             first: int = signal.SIGTERM) -> StopResult:
    """Stop every process of the job: ``first`` signal, then SIGKILL to whatever is still
    alive after ``grace`` seconds.  Returns what was done and the job's exit status."""
    tree = tree or JobTree(proc.pid)
    for pid in extra_pids:
        info = proc_info(pid) if pid > 0 else None
        if info is not None:
            tree.seen.setdefault(pid, info.start)
    targets = tree.snapshot()
    reached = set(targets)
    _signal_all(proc.pid, targets, signal.SIGCONT)  # a SIGSTOPped rank cannot die otherwise
    _signal_all(proc.pid, targets, first)
    deadline = time.monotonic() + grace
    left = targets
    while time.monotonic() < deadline:
        proc.poll()
        _reap(left, proc.pid)
        left = tree.snapshot()
        reached.update(left)
        if not left:
            break
        time.sleep(0.05)
    killed: list[int] = []
    for _ in range(20):  # SIGKILL until nothing of the job is left (new children included)
        left = tree.snapshot()
        if not left:
            break
        reached.update(left)
        killed.extend(p for p in left if p not in killed)
        _signal_all(proc.pid, left, signal.SIGKILL)
        time.sleep(0.05)
        proc.poll()
        _reap(left, proc.pid)
    try:
        code = proc.wait(timeout=max(grace, 5.0))
    except subprocess.TimeoutExpired:
        raise UserError(f"the job (pid {proc.pid}) did not stop; kill it by hand") from None
    _reap(reached, proc.pid)
    return StopResult(code, signal.Signals(first).name, tuple(sorted(reached)),
                      tuple(sorted(killed)))
