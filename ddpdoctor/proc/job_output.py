"""The job's own output, tee'd: what its processes write to stdout and stderr goes where it
went before (ddpdoctor's stdout and stderr, unless the UI shows it) and into RUN_DIR/job.log.

The copy runs in a small process of its own (``python -m ddpdoctor.proc.job_output``), not
in the supervisor: a supervisor that is SIGKILLed leaves the job writing into pipes that
still have their reader, so the job never notices (it trains on, its output still shown
and kept).  The copier ignores Ctrl-C, SIGTERM, SIGHUP and SIGPIPE (the job is stopped by
the supervisor, never by them) and ends when the job's last process has closed its ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

CHUNK = 65536
DRAIN_S = 2.0  # after the job: the time its output (a leftover's too) gets to reach the log
MUTE = signal.SIGUSR1  # to the copier: from now on into the log alone


class JobOutput:
    """Two pipes the job writes into (its stdout and stderr, ``stdout`` and ``stderr``
    here), copied as they come by the copier process to ddpdoctor's own stdout and stderr
    (``console``; else the log alone, as under the UI) and to ``log``, the file at
    ``path``.  ``started()`` once the job has its ends, ``close()`` after the job."""

    def __init__(self, log: IO[bytes], path: Path, console: bool = True) -> None:
        self.path = path
        self.muted = False
        reads, writes = zip(os.pipe(), os.pipe())  # (stdout's, stderr's) ends
        self.stdout, self.stderr = writes
        for fd in writes:
            os.set_inheritable(fd, True)
        try:
            self._copier = subprocess.Popen(
                [sys.executable, "-m", "ddpdoctor.proc.job_output", str(reads[0]), str(reads[1]),
                 str(log.fileno()), "1" if console else "0"],
                pass_fds=(*reads, log.fileno()), stdin=subprocess.DEVNULL,
                env=_copier_env())
        finally:
            for fd in reads:
                os.close(fd)
            log.close()

    def started(self) -> None:
        """The job has its ends now: this process's copies are closed (the pipes end when
        the job's last process does)."""
        for fd in (self.stdout, self.stderr):
            if fd >= 0:
                os.close(fd)
        self.stdout = self.stderr = -1

    def mute(self) -> None:
        """From now on the job's output goes into the log alone (its tracebacks as
        ddpdoctor stops it are kept there, not shown over the summary)."""
        self.muted = True
        if self._copier.poll() is None:
            self._copier.send_signal(MUTE)

    def close(self, timeout: float = DRAIN_S) -> None:
        """Wait (at most ``timeout``) for what the job wrote to be copied; a process of
        the job that still holds a pipe keeps the copier going, on its own, until it ends."""
        self.started()
        try:
            self._copier.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def _copier_env() -> dict[str, str]:
    """The copier imports this module from the ddpdoctor that runs now."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _write(fd: int, data: bytes) -> int | None:
    """``data`` written whole to ``fd``; None once ``fd`` is gone (its reader closed it)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
        except OSError:
            return None
    return fd


class _Copier:
    """The copier's state: the log (shared by both streams) and whether it is muted."""

    def __init__(self, log: int) -> None:
        self.log: int | None = log
        self.muted = False
        self.lock = threading.Lock()

    def copy(self, source: int, to: int | None) -> None:
        """``source`` to ``to`` (while not muted and still read) and to the log, until EOF."""
        while True:
            try:
                data = os.read(source, CHUNK)
            except InterruptedError:
                continue
            if not data:
                return
            if to is not None and not self.muted:
                to = _write(to, data)
            with self.lock:
                if self.log is not None:
                    self.log = _write(self.log, data)  # a full disk: the job goes on


def main(argv: list[str]) -> int:
    """``OUT_FD ERR_FD LOG_FD CONSOLE``: copy the job's two pipes until both end."""
    out, err, log, console = (int(a) for a in argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    copier = _Copier(log)
    signal.signal(MUTE, lambda *_: setattr(copier, "muted", True))
    threads = [threading.Thread(target=copier.copy, args=(src, dst if console else None),
                                daemon=True) for src, dst in ((out, 1), (err, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)  # the main thread stays free for the MUTE signal
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
