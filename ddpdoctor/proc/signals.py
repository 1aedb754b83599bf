"""How a run is ended from outside: the signals that end it and a closed output, each an
interruption with its exit status (128 + the signal's number)."""

from __future__ import annotations

import os
import select
import signal
import stat
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from ddpdoctor.terminal_text import say

# Ctrl-C, a polite kill (or a scheduler's), the terminal going away
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# the output (stdout or stderr) was closed by its reader (`| head`, a killed `| tee`): ended
# as a shell ends a process that writes to a closed pipe, by SIGPIPE, so exit 128 + 13 = 141
OUTPUT_CLOSED = signal.SIGPIPE
WATCHED_FDS = (1, 2)
_GONE = select.POLLERR | select.POLLHUP


class Interrupted(KeyboardInterrupt):
    """The run is ended from outside by ``signum`` (a KeyboardInterrupt, so that every
    place that already stops on Ctrl-C stops on it too)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(error: BaseException) -> int:
    """The signal an interruption stands for: a bare KeyboardInterrupt is Ctrl-C."""
    return getattr(error, "signum", signal.SIGINT)


def exit_status(signum: int) -> int:
    """What a run ended by ``signum`` exits with: 128 + its number, as a shell reports it."""
    return 128 + int(signum)


def describe(signum: int) -> str:
    """Plain words for what ended the run."""
    return {signal.SIGINT: "interrupted (Ctrl-C)",
            signal.SIGTERM: "interrupted (SIGTERM)",
            signal.SIGHUP: "interrupted (SIGHUP: the terminal went away)",
            OUTPUT_CLOSED: "interrupted (the output was closed)"}.get(
                signum, f"interrupted ({signal.Signals(signum).name})")


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextmanager
def interrupts_raised(signals: tuple[int, ...] = ENDING_SIGNALS) -> Iterator[None]:
    """While inside, each of ``signals`` raises Interrupted(signum) in the main thread (a
    signal the process was started ignoring, as `nohup` leaves SIGHUP, stays ignored);
    the previous handlers come back afterwards.  Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in signals:
        if signal.getsignal(sig) is signal.SIG_IGN and sig != signal.SIGINT:
            continue
        previous[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watchable(fd: int) -> bool:
    """Can a reader close ``fd`` on us (a pipe, a socket or a terminal), and is it open and
    not closed already?"""
    return _watchable_kind(fd) and not _closed(fd)


def _closed(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        return any(ev & _GONE for _, ev in poller.poll(0))
    except OSError:
        return False


class OutputWatch:
    """ddpdoctor's stdout and stderr as they were at the start: which of them a reader has
    closed since (the pipe's reader exited, the terminal hung up).  One poll(2) a look."""

    def __init__(self, fds: tuple[int, ...] = WATCHED_FDS):
        self.fds = tuple(fd for fd in fds if _watchable(fd))
        self.ttys = frozenset(fd for fd in self.fds if os.isatty(fd))

    def closed(self) -> tuple[int, ...]:
        """The watched fds whose reader is gone."""
        return tuple(fd for fd in self.fds if _closed(fd))

    def ending_signal(self) -> int | None:
        """What a closed output stands for: SIGHUP for a terminal that hung up (its SIGHUP
        may come a moment later), SIGPIPE for a pipe or socket whose reader went; None
        while every watched output is open."""
        closed = self.closed()
        if not closed:
            return None
        return signal.SIGHUP if self.ttys.intersection(closed) else OUTPUT_CLOSED


def reader_gone(stream: Any) -> bool:
    """Has the reader of ``stream`` (a pipe, a socket, a terminal) closed it?"""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return _watchable_kind(fd) and _closed(fd)


def _watchable_kind(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def silence_closed_output(fds: tuple[int, ...] = WATCHED_FDS) -> None:
    """Point a closed stdout or stderr at /dev/null, so that what is still written to it
    (the interpreter's last flush included) goes nowhere instead of failing."""
    gone = [fd for fd in fds if _open(fd) and _closed(fd)]
    if not gone:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in gone:
        try:
            os.dup2(devnull, fd)
        except OSError:
            continue  # nothing more to do for it
    os.close(devnull)


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def say_to_stderr(text: str) -> None:
    """One line on stderr that never fails (stderr may be a closed pipe or a terminal that
    hung up)."""
    say(text, sys.stderr)  # made safe for a terminal (terminal_text)
