"""LogPane: the tail of the job's output (RUN_DIR/job.log), followed while it grows."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.message import Message
from textual.widgets import Log
from textual.worker import get_current_worker

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.bounded import open_regular
from ddpdoctor.terminal_text import safe_lines

TAIL_INTERVAL_S = 0.25
FIRST_READ_LIMIT = 256 * 1024


class LogPane(Log):
    """A Log widget that follows a file from a background thread."""

    @dataclass
    class Appended(Message):
        """New text was read from the log file."""

        text: str

    def __init__(self, path: Path | None, **kwargs: object) -> None:
        kwargs.setdefault("max_lines", 10_000)
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.path = path
        self._stop = threading.Event()

    def on_mount(self) -> None:
        if self.path is None:
            self.write_line("(no job log: the UI shows the job's output only under `ddpdoctor run --ui`)")
            return
        self.follow(self.path)

    def on_unmount(self) -> None:
        self._stop.set()

    @work(thread=True, exclusive=True, group="log-tail")
    def follow(self, path: Path) -> None:
        """Read what the job appends to `path`, a chunk every quarter second."""
        worker = get_current_worker()
        position = 0
        while not worker.is_cancelled and not self._stop.is_set():
            position = self._read_from(path, position)
            self._stop.wait(TAIL_INTERVAL_S)

    def _read_from(self, path: Path, position: int) -> int:
        try:
            size = path.stat().st_size
        except OSError:
            return position
        if size < position:
            position = 0
        if size == position:
            return position
        try:  # a regular file only: a FIFO planted there never hangs the UI
            fd = open_regular(path)
        except (OSError, UserError):
            return position
        with os.fdopen(fd, "rb") as handle:
            if position == 0 and size > FIRST_READ_LIMIT:
                position = size - FIRST_READ_LIMIT
            handle.seek(position)
            data = handle.read(4 * FIRST_READ_LIMIT)  # a burst: the rest at the next turn
        # the job's output, made safe for the terminal: a progress bar's carriage returns
        # become line breaks, every other control character is shown escaped
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        self.post_message(self.Appended(safe_lines(text)))
        return position + len(data)

    def on_log_pane_appended(self, message: Appended) -> None:
        self.write(message.text)
