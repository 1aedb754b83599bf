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


def become_subreaper(on: bool = True) -> bool:
    """Make this process the child subreaper of everything it starts (``on``), or no longer:
    a process of the job whose parent dies is re-parented here, not to init, so it stays
    findable.  False when the kernel (or libc) cannot do it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl
        return False


def start_job(argv: list[str], env: dict[str, str], output: IO[bytes] | None = None,
              streams: tuple[int, int] | None = None) -> subprocess.Popen:
    """Start the job as the leader of a new session, so one signal reaches all of it; its
    stdout and stderr go to ``output`` (both), to ``streams`` (stdout's fd, stderr's), or
    where this process's go."""
    stdout, stderr = streams if streams else (output, subprocess.STDOUT if output else None)
    try:
        return subprocess.Popen(argv, env=env, start_new_session=True,
                                stdout=stdout, stderr=stderr)
    except OSError as e:
        raise UserError(f"cannot start {argv[0]}: {e.strerror or e}") from None


@dataclass
class JobTree:
    """Every process of a job, as the OS tells: the processes below ``roots`` (by parent
    pid), with ``session`` the whole session ``roots[0]`` leads (and orphans of it that left
    the session and were re-parented to this process, the child subreaper), and each such
    process seen while it ran (kept with its start time, so a pid reused by someone else is
    never taken for the job's)."""

    roots: tuple[int, ...]
    session: bool = True
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time (clock ticks)

    def _current(self) -> dict[int, ProcInfo]:
        table = scan()
        me = os.getpid()
        members = {pid: table[pid] for pid in self.roots if pid in table}
        if self.session:
            own_session = table[me].session if me in table else -1
            members.update({pid: p for pid, p in table.items() if pid != me and (
                p.session == self.roots[0] or (p.ppid == me and p.session != own_session))})
        below = set(members) | set(self.roots) | {pid for pid in self.seen if pid in table}
        for pid in descendants(table, below):
            if pid != me:
                members[pid] = table[pid]
        return members

    def snapshot(self) -> list[int]:
        """Look again; remember every process of the job; returns those alive now."""
        for pid, p in self._current().items():
            self.seen.setdefault(pid, p.start)
        return self.alive()

    def remember(self, pids: Iterable[int]) -> None:
        """Count ``pids`` as the job's (ranks known from their traces)."""
        for pid in pids:
            info = proc_info(pid) if pid > 0 else None
            if info is not None:
                self.seen.setdefault(pid, info.start)

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
    """What a stop did: the signal sent first, every pid it reached, those SIGKILLed, those
    still alive at the end (none, normally), and those frozen before the others went."""

    exit_code: int | None
    signal: str
    pids: tuple[int, ...]
    killed: tuple[int, ...]
    survivors: tuple[int, ...] = ()
    frozen: tuple[int, ...] = ()  # frozen first, then SIGKILLed on purpose

    def as_dict(self, reason: str) -> dict[str, object]:
        return {"reason": reason, "signal": self.signal, "pids": list(self.pids),
                "sigkill": list(self.killed)}


def _signal_all(pids: Iterable[int], sig: int, group: int | None = None) -> None:
    if group is not None:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # gone already, or not ours to signal: the survivors are reported


def _reap(pids: Iterable[int], skip: int | None = None) -> None:
    """Collect the exit status of our children and of orphans re-parented to us (no
    zombies left behind); ``skip`` is a child whose Popen collects it."""
    for pid in pids:
        if pid == skip:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child: its own parent reaps it


def stop_tree(tree: JobTree, grace: float = STOP_GRACE_S, first: int = signal.SIGTERM,
              launcher: subprocess.Popen | None = None,
              quiet: Iterable[int] = ()) -> StopResult:
    """Stop every process of ``tree``: SIGCONT and ``first``, then SIGKILL to whatever is
    still alive after ``grace`` seconds (new children included).  With ``launcher`` (the
    job's Popen, a session leader), its whole process group is signalled too and its exit
    status returned.  ``quiet`` processes (a launcher that would print a traceback over
    ddpdoctor's summary when its workers go) are frozen with SIGSTOP before the others are
    signalled, and SIGKILLed once they are gone."""
    quiet = set(quiet)
    group = launcher.pid if launcher is not None and tree.session else None
    skip = launcher.pid if launcher is not None else None

    def settle(pids: list[int]) -> None:
        if launcher is not None:
            launcher.poll()
        _reap(pids, skip)

    targets = tree.snapshot()
    reached = set(targets)
    # a stopped process cannot act otherwise; the quiet stay as another stop left them
    _signal_all([pid for pid in targets if pid not in quiet], signal.SIGCONT, group)
    _signal_all(quiet, signal.SIGSTOP)
    _signal_all(targets, first, group)
    deadline = time.monotonic() + grace
    left = targets
    while time.monotonic() < deadline:
        settle(left)
        left = tree.snapshot()
        reached.update(left)
        if not set(left) - quiet:
            break
        time.sleep(0.05)
    killed: list[int] = []
    for _ in range(20):  # SIGKILL until nothing of the job is left
        left = tree.snapshot()
        if not left:
            break
        reached.update(left)
        killed.extend(p for p in left if p not in killed)
        _signal_all(left, signal.SIGKILL, group)
        time.sleep(0.05)
        settle(left)
    code = None
    if launcher is not None:
        try:
            code = launcher.wait(timeout=max(grace, 5.0))
        except subprocess.TimeoutExpired:
            raise UserError(f"the job (pid {launcher.pid}) did not stop; kill it by "
                            "hand") from None
    settle(sorted(reached))
    return StopResult(code, signal.Signals(first).name, tuple(sorted(reached)),
                      tuple(sorted(killed)), tuple(tree.alive()), tuple(sorted(quiet)))


def stop_job(proc: subprocess.Popen, tree: JobTree | None = None,
             extra_pids: Iterable[int] = (), grace: float = STOP_GRACE_S,
             first: int = signal.SIGTERM, quiet_launcher: bool = False) -> StopResult:
    """Stop the job ddpdoctor started (``proc``, leader of its session) and every process
    of it; ``quiet_launcher``: freeze ``proc`` first, so that torchrun (or an mp.spawn
    parent) does not print its workers' deaths over ddpdoctor's verdict.  Returns what was
    done and the job's exit status."""
    tree = tree or JobTree((proc.pid,))
    tree.remember(extra_pids)
    return stop_tree(tree, grace, first, launcher=proc,
                     quiet=(proc.pid,) if quiet_launcher else ())


def stop_whole_job(proc: subprocess.Popen | None, tree: JobTree | None) -> None:
    """Stop whatever of the job still runs (the launcher, its ranks, their DataLoader
    workers, orphans): the stop path's stop, whatever ddpdoctor's state."""
    if proc is None:
        return
    tree = tree or JobTree((proc.pid,))
    if proc.poll() is None or tree.snapshot():
        stop_job(proc, tree)
