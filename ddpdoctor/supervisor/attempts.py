"""Attempts: the supervisor's part in a job that torchrun may restart (``--max-restarts N``):
which attempt runs, where each writes (RUN_DIR/attempt-K/), and every attempt's report.

A rank failure while restarts remain is torchrun's to handle: no verdict stops the job
then (unless no new attempt starts within the hang timeout); once the next attempt's dir
appears, the finished attempt's report is written and the watch moves on.  At the end the
top-level report is the last attempt's, listing every attempt."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ddpdoctor.report.attempts import attempt_entry, describe_attempts, with_attempts
from ddpdoctor.rundir.attempts import attempt_dir, make_attempt_dir
from ddpdoctor.rundir.layout import RUN_FILE, read_run_file, write_json_atomic

REPORT = "report.json"


class Attempts:
    """The attempts of a job under ``base_dir``: ``max_restarts`` allowed, ``entries`` the
    report lines of those that ended."""

    def __init__(self, base_dir: Path, max_restarts: int) -> None:
        self.base_dir = base_dir
        self.max_restarts = max_restarts
        self.entries: list[dict[str, Any]] = []

    def enter(self, attempt: int) -> Path:
        """Attempt ``attempt``'s run dir, made, with its run.json (the base's, naming the
        attempt and where the job's report goes)."""
        path = make_attempt_dir(self.base_dir, attempt)
        info = read_run_file(self.base_dir)
        if info:
            info.update(attempt=attempt, report=str(path / REPORT))
            write_json_atomic(path / RUN_FILE, info)
        return path

    def run_dir_of(self, attempt: int) -> Path:
        return make_attempt_dir(self.base_dir, attempt)

    def next_started(self, attempt: int) -> bool:
        """Did torchrun start the attempt after ``attempt`` (its ranks made its dir)?"""
        return attempt < self.max_restarts and \
            (attempt_dir(self.base_dir, attempt + 1) / "traces").is_dir()

    def restart_expected(self, attempt: int, failed_at: float | None,
                         hang_timeout: float) -> bool:
        """A rank of ``attempt`` failed (at ``failed_at``, monotonic), a restart remains and
        is not overdue."""
        return (attempt < self.max_restarts and failed_at is not None and
                time.monotonic() - failed_at < hang_timeout)

    def ended(self, attempt: int, report: dict[str, Any]) -> None:
        """Attempt ``attempt`` ended with ``report``: its line in the top-level report."""
        self.entries.append(attempt_entry(attempt, report, f"attempt-{attempt}/{REPORT}"))

    def top(self, last: dict[str, Any]) -> dict[str, Any]:
        """The top-level report: the last attempt's, with ``attempt`` and ``attempts``."""
        return with_attempts(last, self.entries)

    def summary(self) -> str:
        """"attempts: 0 failed; 1 completed" when there was more than one, else ""."""
        return describe_attempts(self.entries) if len(self.entries) > 1 else ""
