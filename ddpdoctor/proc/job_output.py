"""The job's own output, tee'd: what its processes write to stdout and stderr goes where it
went before (ddpdoctor's stdout and stderr, unless the UI shows it) and into RUN_DIR/job.log."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO

CHUNK = 65536
DRAIN_S = 2.0  # after the job: the time its output (a leftover's too) gets to reach the log


class JobOutput:
    """Two pipes the job writes into (its stdout and stderr), each copied as it comes to
    its own ``to`` fd (None: the log alone, as under the UI) and to ``log``.  A closed
    ``to`` (`| head`) or a full disk never stops the job: the copy goes on to what is
    left.  ``stdout`` and ``stderr`` are the job's ends; ``close()`` after the job."""

    def __init__(self, log: IO[bytes], path: Path, to: tuple[int, int] | None = (1, 2)) -> None:
        self.log = log
        self.path = path  # the log's
        self.muted = False  # set: from now on into the log alone
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stdout, self.stderr = -1, -1
        ends = []
        for index in (0, 1):
            read_end, write_end = os.pipe()
            os.set_inheritable(write_end, True)
            ends.append(write_end)
            thread = threading.Thread(target=self._copy, name=f"ddpdoctor-job-output-{index}",
                                      args=(read_end, to[index] if to else None), daemon=True)
            self._threads.append(thread)
        self.stdout, self.stderr = ends
        for thread in self._threads:
            thread.start()

    def started(self) -> None:
        """The job has its ends now: this process's copies are closed (the pipes end when
        the job's last process does)."""
        for fd in (self.stdout, self.stderr):
            os.close(fd)
        self.stdout = self.stderr = -1

    def _copy(self, read_end: int, to: int | None) -> None:
        try:
            while True:
                try:
                    data = os.read(read_end, CHUNK)
                except InterruptedError:
                    continue
                if not data:
                    return
                if to is not None and not self.muted:
                    to = _write(to, data)
                with self._lock:
                    try:
                        self.log.write(data)
                    except (OSError, ValueError):
                        pass  # a full disk or a closed log: the job goes on
        finally:
            os.close(read_end)

    def mute(self) -> None:
        """From now on the job's output goes into the log alone (its tracebacks as
        ddpdoctor stops it are kept there, not shown over the summary)."""
        self.muted = True

    def close(self, timeout: float = DRAIN_S) -> None:
        """Wait (at most ``timeout``) for what the job wrote to be copied, then close the
        log; a process of the job that still holds a pipe is not waited for longer."""
        if self.stdout >= 0:
            self.started()
        for thread in self._threads:
            thread.join(timeout)
        with self._lock:
            try:
                self.log.close()
            except OSError:
                pass


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
