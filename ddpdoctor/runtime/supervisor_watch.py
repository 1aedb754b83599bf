"""When ddpdoctor's supervisor is gone (SIGKILLed), the job runs on; if it then hangs, end it."""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ddpdoctor.config import HANG_TIMEOUT
from ddpdoctor.proc.progress import TreeProgress, made_progress
from ddpdoctor.proc.reaper import REAP_GRACE_S, start_reaper, stop_marked
from ddpdoctor.proc.table import descendants, proc_info, scan
from ddpdoctor.rundir.attempts import is_attempt_dir
from ddpdoctor.rundir.safe_path import CheckedDir

SUPERVISOR_PID_ENV = "DDPDOCTOR_SUPERVISOR_PID"
ON_HANG_ENV = "DDPDOCTOR_ON_HANG"  # stop or wait, as --on-hang
ENDING_LOCK = "ending.lock"  # in the run dir: held by the one process that ends the job
CHECK_S = 2.0
WAIT_FOR_REAPER_S = 10.0  # beyond its grace: a reaper that did not end this process failed


class SupervisorWatch:
    """Decides from facts the job itself can see: the supervisor process is gone, no rank
    wrote a trace record and no rank's process tree made progress (the supervisor's own
    rule, ``proc.progress.made_progress``: CPU, I/O, a worker in a timed sleep) for
    ``hang_timeout`` seconds.  Under ``--on-hang wait`` it says so once and leaves the job
    running."""

    def __init__(self, run_dir: Path, supervisor: int, hang_timeout: float,
                 on_hang: str = "stop"):
        self.run_dir = run_dir
        self.supervisor = supervisor
        info = proc_info(supervisor)
        self.supervisor_start = info.start if info is not None else None
        self.hang_timeout = hang_timeout
        self.on_hang = on_hang
        self._counts: dict[int, int] | None = None
        self._trees: dict[int, TreeProgress] = {}
        self._still_since = time.monotonic()
        self._left_running = False

    def supervisor_gone(self) -> bool:
        info = proc_info(self.supervisor)
        return (info is None or info.start != self.supervisor_start
                or info.state in ("Z", "X"))

    def _traces(self) -> dict[int, int]:
        """pid -> record count of every trace in the run dir."""
        from ddpdoctor.trace.reader import TraceError, read_header

        out = {}
        for path in (self.run_dir / "traces").glob("pid-*.ring"):
            try:
                with open(path, "rb") as f:
                    header = read_header(f.read(4096), path)
            except (OSError, TraceError):
                continue
            out[header.pid] = header.count
        return out

    def _trees_progressed(self, pids: list[int], now: float) -> bool:
        """Did any rank's process tree make progress since the previous check?"""
        table = scan() if pids else {}
        progressed = False
        for pid in pids:
            tree = self._trees.setdefault(pid, TreeProgress(pid))
            tree.set_children(descendants(table, [pid]))
            look = tree.look(int(now * 1e9))
            progressed = progressed or (look is not None and made_progress(look))
        self._trees = {pid: t for pid, t in self._trees.items() if pid in pids}
        return progressed

    def job_still(self, now: float) -> bool:
        """True when nothing moved for ``hang_timeout`` seconds (called every CHECK_S)."""
        counts = self._traces()
        moved = self._trees_progressed(sorted(counts), now)
        if counts != self._counts or moved:
            self._still_since = now
        self._counts = counts
        return now - self._still_since >= self.hang_timeout

    def run(self) -> None:
        """Check every CHECK_S until the job is ended; a failed check (a process read while
        it vanished) is said once and the watch goes on."""
        said = False
        while True:
            time.sleep(CHECK_S)
            try:
                self._check()
            except Exception as e:  # noqa: BLE001 - the watch must never disturb the job
                if not said:
                    said = True
                    _say(f"ddpdoctor: the supervisor watch failed a check "
                         f"({type(e).__name__}: {e}); it goes on")

    def _check(self) -> None:
        if not self.supervisor_gone():
            self._counts, self._trees = None, {}
            self._still_since = time.monotonic()
        elif not self.job_still(time.monotonic()):
            self._left_running = False
        elif self.on_hang == "wait":
            if not self._left_running:
                self._left_running = True
                _say(f"ddpdoctor: the supervisor (pid {self.supervisor}) is gone and the job "
                     f"made no progress for {self.hang_timeout:g} s: left running "
                     f"(--on-hang wait)")
        else:
            # returns while another process of the job ends it; should that one die before
            # its reaper starts, the claim is free again and the next check takes it
            end_job(f"the supervisor (pid {self.supervisor}) is gone and the job made "
                    f"no progress for {self.hang_timeout:g} s", self.supervisor, self.run_dir)


def end_job(why: str, supervisor: int, run_dir: Path) -> None:
    """End every process of the job: those whose environment holds ``supervisor``'s pid, in
    whatever session or parent they are now, and those below them.  The first process of
    the job to decide claims the ending (a lock in the run dir) and says so; the others
    wait to be ended with it.  A reaper of its own does the work (``start_reaper``), so
    that the launcher's reaction to its first signal (torchrun's: SIGTERM to its workers)
    cannot end it half-way; where no reaper could start, this process ends the others
    itself, then itself."""
    claim = _claim_ending(run_dir)
    if claim is None:
        return  # another process of the job is ending it (this one included)
    _say(f"ddpdoctor: {why}: ending the job")
    mark = f"{SUPERVISOR_PID_ENV}={supervisor}"
    if start_reaper(mark, keep_fd=claim):
        time.sleep(REAP_GRACE_S + WAIT_FOR_REAPER_S)  # the reaper ends this process
    stop_marked(mark)
    os.kill(os.getpid(), signal.SIGKILL)


def _claim_ending(run_dir: Path) -> int | None:
    """A lock on the job's ENDING_LOCK (in the run dir of the whole job, whatever attempt
    this process is of), held by this process and then by its reaper: its fd; None when
    another process of the job holds it; -1 when no lock can be had (the job is ended all
    the same)."""
    base = run_dir.parent if is_attempt_dir(run_dir) else run_dir
    try:
        with CheckedDir(base) as folder:
            fd = folder.open_lock(ENDING_LOCK)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        pass  # a file system without locks: every process that decides ends the job
    return fd


def _say(line: str) -> None:
    """A line on stderr; a closed stderr (the terminal went with the supervisor) is no
    reason for the watch to stop."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


_watching: int | None = None  # the pid whose watch runs (a forked rank has none)


def start() -> None:
    """Start the watch in this process when ddpdoctor's supervisor started the job (once per
    process: a forked child starts its own, as threads do not survive fork)."""
    global _watching
    pid = os.environ.get(SUPERVISOR_PID_ENV, "")
    run_dir = os.environ.get("DDPDOCTOR_RUN_DIR", "")
    if not pid.isdigit() or not run_dir or _watching == os.getpid():
        return
    _watching = os.getpid()
    try:
        hang_timeout = float(os.environ.get("DDPDOCTOR_HANG_TIMEOUT", HANG_TIMEOUT))
    except ValueError:
        hang_timeout = HANG_TIMEOUT
    on_hang = os.environ.get(ON_HANG_ENV, "stop")
    watch = SupervisorWatch(Path(run_dir), int(pid), hang_timeout, on_hang)
    threading.Thread(target=watch.run, name="ddpdoctor-supervisor-watch", daemon=True).start()
