"""The runs of a runs folder (./ddpdoctor-runs): each one's time, outcome, command, size on
disk and whether it is live, and the lock a live run holds.

A run is live while the `ddpdoctor run` (or `attach`) that made it holds a shared lock on
its directory (``hold_live``: flock, released by the kernel when that process ends, however
it ends), or while a process of its job still runs (its environment carries the run's id:
a job whose supervisor was killed goes on writing its traces).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import stat
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ddpdoctor.rundir.bounded import BadInput, read_file
from ddpdoctor.rundir.layout import RUN_FILE, read_run_file
from ddpdoctor.terminal_text import safe

RUN_NAME = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}(-attach)?")  # new_run_id()'s names
ENV_RUN_ID = "DDPDOCTOR_RUN_ID"  # set by launch/command.py in every process of a job
_OUTCOME = re.compile(rb'"outcome":\s*"([a-z_]{1,20})"')
_HEAD = 4096  # report.json's outcome is its second key


@dataclass(frozen=True)
class RunEntry:
    """One run dir of a runs folder.

    path: the run dir.  run_id: its id (run.json), "" when unknown.  started: when it
    started (run.json, else the directory's mtime), seconds since the epoch.  outcome: the
    report's, "running" while live, "-" without a report.  command: as the user typed it.
    size: bytes it takes on disk (allocated blocks: a sparse trace costs what it holds).
    live: its run or job still runs.  generated: ddpdoctor named it (a --run-dir the user
    named is never pruned).
    """

    path: Path
    run_id: str
    started: float
    outcome: str
    command: str
    size: int
    live: bool
    generated: bool

    @property
    def started_text(self) -> str:
        return datetime.fromtimestamp(self.started).strftime("%Y-%m-%d %H:%M:%S")


def hold_live(run_dir: Path) -> int | None:
    """Mark ``run_dir`` live for as long as this process runs: a shared lock on it (the fd
    returned is kept open; close-on-exec, so the job's processes never hold it).  None
    when the lock cannot be taken (the run is then still told live by its job)."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _locked(path: Path) -> bool:
    """Does a process hold ``hold_live``'s lock on ``path``?"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's own lock
    return False


def running_run_ids() -> frozenset[str]:
    """The run ids in the environment of this user's running processes (/proc)."""
    needle = f"{ENV_RUN_ID}=".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue  # gone, or another user's
        for entry in env.split(b"\0"):
            if entry.startswith(needle):
                found.add(entry[len(needle):].decode(errors="replace"))
    return frozenset(found)


def disk_bytes(path: Path) -> int:
    """Bytes ``path``'s files take on disk (links not followed)."""
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _outcome(run_dir: Path) -> str:
    """The outcome report.json names (read from its head alone: a report of thousands of
    ranks is large), else "-"."""
    try:  # a regular file, not a link: a FIFO planted there never hangs the listing
        found = _OUTCOME.search(read_file(run_dir / "report.json", _HEAD, head=True))
    except (OSError, BadInput):
        return "-"
    return found.group(1).decode() if found else "-"


def _command(info: dict) -> str:
    command = info.get("command")
    if isinstance(command, list) and all(isinstance(a, str) for a in command):
        return safe(shlex.join(command))  # a run.json may be anyone's who could write here
    return "-"


def read_run(path: Path, running: frozenset[str]) -> RunEntry | None:
    """The run at ``path`` (a directory, not a link), or None when it is no run dir."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not ((path / RUN_FILE).is_file() or
                                            (path / "traces").is_dir()):
        return None
    try:
        info = read_run_file(path)
    except BadInput:  # no regular file, or huge: a run dir someone else shaped; no facts
        info = {}
    run_id = info.get("run_id") if isinstance(info.get("run_id"), str) else ""
    started = _started(info.get("started_at"), st.st_mtime)
    live = _locked(path) or (bool(run_id) and run_id in running)
    outcome = "running" if live else _outcome(path)
    generated = bool(RUN_NAME.fullmatch(path.name)) and run_id in ("", path.name) and \
        info.get("named_run_dir") is not True
    return RunEntry(path, run_id, started, outcome, _command(info), disk_bytes(path), live,
                    generated)


def _started(text: object, fallback: float) -> float:
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass  # not ISO 8601: the directory's time
    return fallback


def list_runs(folder: Path) -> list[RunEntry]:
    """The runs in ``folder`` (its direct subdirectories that are run dirs), newest
    first."""
    running = running_run_ids()
    runs = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        run = read_run(Path(entry.path), running)
        if run is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: (r.started, r.path.name), reverse=True)


def age_seconds(run: RunEntry, now: float | None = None) -> float:
    return (time.time() if now is None else now) - run.started
