"""Supervise a job that torchrun may restart: one report per attempt, and one on top."""

from __future__ import annotations

import os
import time
from typing import Any

from ddpdoctor.report.attempts import attempt_entry, describe_attempts, with_attempts
from ddpdoctor.redact import redact_argv
from ddpdoctor.rundir.attempts import attempt_dir, make_attempt_dir
from ddpdoctor.rundir.layout import RUN_FILE, read_run_file, write_json_atomic
from ddpdoctor.supervisor.loop import Supervisor, Verdict
from ddpdoctor.supervisor.progress import ProgressTracker
from ddpdoctor.supervisor.watch import LiveJob
from ddpdoctor.rundir.safe_path import PARENT_MODE, make_dirs

REPORT = "report.json"


class AttemptSupervisor(Supervisor):
    """A Supervisor that follows the job from attempt to attempt (RUN_DIR/attempt-K/).

    A rank failure while restarts remain is torchrun's to handle: no verdict stops the
    job then (unless no new attempt starts within the hang timeout); once the next
    attempt's dir appears, the finished attempt's report is written and the watch moves
    on.  At the end the top-level report is the last attempt's, listing every attempt."""

    def __init__(self, *args: Any, max_restarts: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.base_dir = self.run_dir
        self.top_report_path = self.report_path
        self.max_restarts = max_restarts
        self.attempt = 0
        self.attempts: list[dict[str, Any]] = []
        self._enter(0)

    def _enter(self, attempt: int) -> None:
        """Watch attempt ``attempt``: its dir, its traces, its log, its report."""
        self.attempt = attempt
        self.run_dir = make_attempt_dir(self.base_dir, attempt)
        self.report_path = self.run_dir / REPORT
        info = read_run_file(self.base_dir)
        if info:
            info.update(attempt=attempt, report=str(self.report_path))
            write_json_atomic(self.run_dir / RUN_FILE, info)
        self.live = LiveJob(self.run_dir)
        self.progress = ProgressTracker()
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None
        self._warned_mismatch = False
        self._failure_seen_at = None
        self._last_counts = ()
        self._uneven_said = False
        self._stacks_early = False
        self.judged_hung = False
        self._stragglers_said = set()
        self._next_judge = 0.0

    def run(self) -> int:
        code = super().run()
        self._write_top(self.report)
        return code

    def _check(self) -> Verdict | None:
        if self.attempt < self.max_restarts and \
                (attempt_dir(self.base_dir, self.attempt + 1) / "traces").is_dir():
            self._next_attempt()
            return None
        verdict = super()._check()
        if verdict is not None and self._restart_expected() and verdict.reason != "interrupt":
            return None  # torchrun stops this attempt's ranks and starts the next one
        return verdict

    def _restart_expected(self) -> bool:
        """A rank of this attempt failed, a restart remains and is not overdue."""
        return (self.attempt < self.max_restarts and self._failure_seen_at is not None and
                time.monotonic() - self._failure_seen_at < self.config.hang_timeout)

    def _next_attempt(self) -> None:
        """The agent started attempt K+1: report attempt K as failed, then follow K+1."""
        self.live.poll()
        for p in self.live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)
        if self.progress.by_pid:
            self.log("progress", ranks=self.progress.event())
        report = self._write("failed", None, live=False)
        report["attempt"] = self.attempt
        report["live"] = False
        if self.report_path is not None:
            write_json_atomic(self.report_path, report)
        self.attempts.append(attempt_entry(self.attempt, report,
                                           f"attempt-{self.attempt}/{REPORT}"))
        self.say(f"attempt {self.attempt} {report.get('outcome')}: {_why(report)}; "
                 f"report {self.report_path}; torchrun restarts the job "
                 f"(attempt {self.attempt + 1}, at most {self.max_restarts} restarts)", "yellow")
        self._enter(self.attempt + 1)
        self.log("start", pid=self.proc.pid, command=redact_argv(self.config.command),
                 attempt=self.attempt)

    def _write_top(self, last: dict[str, Any] | None) -> None:
        """The top-level report: the last attempt's, with ``attempt`` and ``attempts``."""
        if last is None:
            return
        last["attempt"] = self.attempt
        if self.report_path is not None:
            write_json_atomic(self.report_path, last)
        entries = self.attempts + [attempt_entry(self.attempt, last,
                                                 f"attempt-{self.attempt}/{REPORT}")]
        top = with_attempts(last, entries)
        try:
            make_dirs(self.top_report_path.parent, PARENT_MODE)
            write_json_atomic(self.top_report_path, top)
        except OSError as e:
            self.say(f"cannot write the report to {self.top_report_path}: {e.strerror or e}",
                     "red")
            return
        self.report = top
        if len(entries) > 1:
            self.say(f"{describe_attempts(entries)}; report: {self.top_report_path}")


def _why(report: dict[str, Any]) -> str:
    """The first root cause of an attempt's report, in one line."""
    for f in report.get("findings", []):
        if f.get("severity") == "error" and f.get("caused_by") is None:
            return str(f.get("summary", f.get("kind", "")))
    return "no root cause named"

