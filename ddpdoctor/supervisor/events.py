"""What the supervisor writes as it goes: its events (RUN_DIR/supervisor.jsonl, read back by
the analysis) and its one-line notices on the console."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from ddpdoctor.rundir.safe_path import open_append

Say = Callable[..., None]  # say(text, style=""): Voice.say


class EventLog:
    """RUN_DIR/supervisor.jsonl of one run dir (one attempt's), opened at the first event;
    a failure to write is kept in ``problems`` (the report lists it)."""

    def __init__(self, run_dir: Path, problems: list[str]) -> None:
        self.path = run_dir / "supervisor.jsonl"
        self.problems = problems
        self._fd: int | None = None

    def __call__(self, event: str, **fields: Any) -> None:
        """Append one event (with its name and the time, ns) as a JSON line."""
        fields.update(event=event, t=time.time_ns())
        try:
            if self._fd is None:
                self._fd = open_append(self.path)
            os.write(self._fd, (json.dumps(fields, default=str) + "\n").encode())
        except OSError as e:
            self.problems.append(f"cannot write supervisor.jsonl: {e.strerror or e}")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Voice:
    """The supervisor's notices on ``console`` (stderr), silent while the UI shows the run
    (``quiet``) or when the user asked for less (``notices`` False); the summary at the end
    goes to ``out`` (stdout), in the form ``shown``."""

    def __init__(self, console: Console, quiet: bool = False, out: Console | None = None,
                 shown: str = "summary") -> None:
        self.console = console
        self.quiet = quiet
        self.out = out if out is not None else console
        self.shown = shown

    def say(self, text: str, style: str = "") -> None:
        """One line on the console; ``text`` is plain (a rank's error text can hold what
        rich would read as markup, e.g. gloo's ``[/__w/...pair.cc:553]``)."""
        if not self.quiet:
            self.console.print(f"[bold]ddpdoctor:[/bold] {escape(text)}", style=style,
                               highlight=False, soft_wrap=True)  # one line, never split
