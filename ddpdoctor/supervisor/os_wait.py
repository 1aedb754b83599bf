"""What an idle process waits on, as the OS tells: /proc/PID/wchan and /proc/PID/syscall."""

from __future__ import annotations

import platform
from typing import Any

# syscall number -> name, for the calls a blocked Python process is usually in
SYSCALLS: dict[str, dict[int, str]] = {
    "x86_64": {0: "read", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep",
               43: "accept", 45: "recvfrom", 47: "recvmsg", 61: "wait4", 72: "fcntl",
               73: "flock", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait",
               247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
               288: "accept4", 441: "epoll_pwait2"},
    "aarch64": {22: "epoll_pwait", 25: "fcntl", 32: "flock", 63: "read", 72: "pselect6",
                73: "ppoll", 95: "waitid", 98: "futex", 101: "nanosleep",
                115: "clock_nanosleep", 202: "accept", 207: "recvfrom", 212: "recvmsg",
                242: "accept4", 260: "wait4"},
}

# what each call means for a Python rank, in a few words
MEANING = {
    "futex": "a lock, a condition or a queue (queue.get, a Lock, a thread's join)",
    "read": "a read: a pipe, a socket or the terminal (input())",
    "recvfrom": "a socket read", "recvmsg": "a socket read",
    "flock": "a file lock", "fcntl": "a file lock (fcntl)",
    "nanosleep": "a sleep", "clock_nanosleep": "a sleep", "pause": "a signal (pause)",
    "poll": "I/O readiness", "ppoll": "I/O readiness", "select": "I/O readiness",
    "pselect6": "I/O readiness", "epoll_wait": "I/O readiness",
    "epoll_pwait": "I/O readiness", "epoll_pwait2": "I/O readiness",
    "accept": "an incoming connection", "accept4": "an incoming connection",
    "wait4": "a child process to exit", "waitid": "a child process to exit",
}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:  # gone, or not ours to read: nothing told
        return None


def syscall_name(number: int, machine: str | None = None) -> str:
    table = SYSCALLS.get(machine or platform.machine(), {})
    return table.get(number, f"syscall {number}")


def lock_holder(pid: int, locks: str | None = None) -> int | None:
    """The pid that holds the file lock ``pid`` waits for, from /proc/locks (a waiter's
    line is ``N: -> FLOCK ... PID ...`` below its holder's ``N: FLOCK ... PID ...``)."""
    text = _read("/proc/locks") if locks is None else locks
    lines = [line.split() for line in (text or "").splitlines()]
    waits = next((f[0] for f in lines if len(f) > 5 and f[1] == "->" and f[5] == str(pid)),
                 None)
    if waits is None:
        return None
    held = next((f[4] for f in lines if len(f) > 4 and f[0] == waits and f[1] != "->"), None)
    return int(held) if held is not None and held.isdigit() else None


def os_wait(pid: int) -> dict[str, Any] | None:
    """{"syscall", "wchan", "meaning"} of a process blocked in a system call; None when
    it runs (or /proc does not say)."""
    raw = _read(f"/proc/{pid}/syscall")
    if not raw or raw.startswith("running"):
        return None
    first = raw.split()[0]
    try:
        number = int(first)
    except ValueError:
        return None
    if number < 0:
        return None
    name = syscall_name(number)
    wchan = _read(f"/proc/{pid}/wchan") or ""
    found: dict[str, Any] = {"syscall": name, "wchan": "" if wchan == "0" else wchan,
                             "meaning": MEANING.get(name, "")}
    if name in ("flock", "fcntl"):
        found["holder_pid"] = lock_holder(pid)
    return found


def sample_idle(live: Any, progress: Any, log: Any, said: dict[int, tuple]) -> None:
    """For the local ranks that look idle (no open call, no CPU progress in the last window)
    and only for them: log what the OS says each waits on (an ``os_wait`` event of
    supervisor.jsonl), when it changed or the rank recorded calls since it was said."""
    for rank, p in live.local_ranks().items():
        pid = p.header.pid
        if p.gone or p.open:
            continue
        prog = progress.by_pid.get(pid)
        if prog is None or prog.cpu_busy:
            continue
        found = os_wait(pid)
        if found is None:
            continue
        key = (found["syscall"], p.read_upto)
        if said.get(pid) != key:
            said[pid] = key
            log("os_wait", pid=pid, rank=rank, **found)
