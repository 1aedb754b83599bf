"""Start the job in a process group of its own, and stop all of it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import IO, Iterable

from ddpdoctor.errors import UserError


def start_job(argv: list[str], env: dict[str, str],
              output: IO[bytes] | None = None) -> subprocess.Popen:
    """Start the job as the leader of a new session, so one signal reaches all of it."""
    try:
        return subprocess.Popen(argv, env=env, start_new_session=True,
                                stdout=output, stderr=subprocess.STDOUT if output else None)
    except OSError as e:
        raise UserError(f"cannot start {argv[0]}: {e.strerror or e}") from None


def alive(pid: int) -> bool:
    """Is ``pid`` running (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def proc_state(pid: int) -> str:
    """One-letter kernel state of ``pid`` (R, S, D, T stopped, Z zombie) or "" if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _signal_all(pgid: int, pids: Iterable[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # this one is gone already


def stop_job(proc: subprocess.Popen, extra_pids: Iterable[int] = (),
             grace: float = 5.0, first: int = signal.SIGTERM) -> int:
    """Stop the job's whole process group (and ``extra_pids``): ``first`` signal, then
    SIGKILL after ``grace`` seconds.  Returns the job's exit status."""
    pids = [p for p in extra_pids if p > 0]
    _signal_all(proc.pid, pids, signal.SIGCONT)  # a SIGSTOPped rank cannot die otherwise
    _signal_all(proc.pid, pids, first)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(alive(p) for p in pids):
            break
        time.sleep(0.05)
    _signal_all(proc.pid, [p for p in pids if alive(p)], signal.SIGKILL)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        raise UserError(f"the job (pid {proc.pid}) did not stop; kill it by hand") from None
