"""The job's own output, tee'd: what its processes write to stdout and stderr goes where it
went before (ddpdoctor's stdout and stderr, unless the UI shows it) and into RUN_DIR/job.log.

The copy runs in a small process of its own (``python -m ddpdoctor.proc.job_output``), not
in the supervisor: a supervisor that is SIGKILLed leaves the job writing into pipes that
still have their reader, so the job never notices (it trains on, its output still shown
and kept).  The copier ignores Ctrl-C, SIGTERM, SIGHUP and SIGPIPE (the job is stopped by
the supervisor, never by them) and ends when the job's last process has closed its ends."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios
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
        reads, writes, self.piped_terminal = _ends(console)
        self.stdout, self.stderr = writes
        for fd in set(writes):
            os.set_inheritable(fd, True)
        try:
            self._copier = subprocess.Popen(
                [sys.executable, "-m", "ddpdoctor.proc.job_output", str(reads[0]), str(reads[1]),
                 str(log.fileno()), "1" if console else "0"],
                pass_fds=(*(fd for fd in reads if fd >= 0), log.fileno()),
                stdin=subprocess.DEVNULL,
                env=_copier_env())
        finally:
            for fd in reads:
                if fd >= 0:
                    os.close(fd)
            log.close()

    def started(self) -> None:
        """The job has its ends now: this process's copies are closed (the pipes end when
        the job's last process does)."""
        for fd in {self.stdout, self.stderr}:
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


def _terminal(fd: int) -> os.stat_result | None:
    try:
        return os.fstat(fd) if os.isatty(fd) else None
    except OSError:
        return None


def _pty_like(real: int) -> tuple[int, int]:
    """(reading end, writing end) of a pseudo-terminal sized as the terminal at ``real``,
    passing bytes as they are written (no output processing: the copy is the bytes)."""
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(real, termios.TIOCGWINSZ, b"\0" * 8))
    except (OSError, termios.error):
        pass  # a size unknown: the pseudo-terminal's own
    return master, slave


def _ends(console: bool) -> tuple[tuple[int, int], tuple[int, int], bool]:
    """The (stdout's, stderr's) reading ends for the copier, their writing ends for the job,
    and whether a terminal got a pipe.  Where ddpdoctor's stream is a terminal the job
    gets a pseudo-terminal, so that its code sees a terminal as it would without ddpdoctor
    (colours, progress bars, line buffering); stdout and stderr on one terminal share one,
    their order kept (the copier's second reading end is then -1)."""
    out, err = (_terminal(1), _terminal(2)) if console else (None, None)
    try:
        if out is not None and err is not None and out.st_rdev == err.st_rdev:
            master, slave = _pty_like(1)
            return (master, -1), (slave, slave), False
        pairs = [(_pty_like(k) if seen is not None else os.pipe())
                 for k, seen in ((1, out), (2, err))]
        return (pairs[0][0], pairs[1][0]), (pairs[0][1], pairs[1][1]), False
    except OSError:  # no pseudo-terminal to be had: pipes
        (r1, w1), (r2, w2) = os.pipe(), os.pipe()
        return (r1, r2), (w1, w2), out is not None or err is not None


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
            except OSError:  # a pseudo-terminal whose last writer closed (EIO): the end
                return
            if not data:
                return
            if to is not None and not self.muted:
                to = _write(to, data)
            with self.lock:
                if self.log is not None:
                    self.log = _write(self.log, data)  # a full disk: the job goes on


def main(argv: list[str]) -> int:
    """``OUT_FD ERR_FD LOG_FD CONSOLE``: copy the job's two streams until both end (an
    ERR_FD of -1: stderr shares stdout's pseudo-terminal)."""
    out, err, log, console = (int(a) for a in argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    copier = _Copier(log)
    signal.signal(MUTE, lambda *_: setattr(copier, "muted", True))
    threads = [threading.Thread(target=copier.copy, args=(src, dst if console else None),
                                daemon=True) for src, dst in ((out, 1), (err, 2)) if src >= 0]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)  # the main thread stays free for the MUTE signal
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
