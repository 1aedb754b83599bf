"""ReportSource: where the UI gets its report from (a report.json, a finished or a live run dir)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from ddpdoctor.errors import UserError
from ddpdoctor.proc.table import alive
from ddpdoctor.rundir.attempts import attempt_dirs
from ddpdoctor.rundir.layout import is_run_dir
from ddpdoctor.tui.live_follow import LiveFollower

REPORT_SCHEMA = "ddpdoctor.report/1"
#: How long to wait for the supervisor's report.json after the job ended.
FINAL_REPORT_GRACE_S = 10.0


class ReportFeed(Protocol):
    """Anything the UI can poll for reports (a ReportSource, or a fake one in tests)."""

    def poll(self) -> dict[str, Any]:
        """The report at this moment; raises UserError when there is none."""
        ...

    @property
    def finished(self) -> bool:
        """True once the last poll returned the final report: no need to poll again."""
        ...


class ReportSource:
    """Reads a report.json, or a live run's state (the supervisor's live.json and the
    traces' new records), or builds a report from a run dir, each time it is polled.

    Args:
        path: a report.json, or a run dir (one containing run.json or traces/).
        is_running: tells whether the job is still running; when None, a run dir
            counts as live while its report.json is missing or a traced process lives.
    """

    def __init__(self, path: Path, is_running: Callable[[], bool] | None = None) -> None:
        self.path = Path(path)
        self.is_running = is_running
        self._finished = False
        self._ended_at: float | None = None
        # a live run's supervisor publishes its view: read that, not a rebuilt report
        self.follower = LiveFollower(lambda run_dir: build_run_dir_report(run_dir))

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def run_dir(self) -> Path | None:
        return self.path if self.path.is_dir() else None

    @property
    def job_log(self) -> Path | None:
        """RUN_DIR/job.log (the job's output under --ui) when there is one."""
        run_dir = self.run_dir if self.run_dir else self.path.parent
        log = run_dir / "job.log"
        return log if log.is_file() else None

    def poll(self) -> dict[str, Any]:
        if not self.path.exists():
            raise UserError(f"{self.path} does not exist: give a run dir or a report.json")
        if self.path.is_file():
            report = load_report_file(self.path)
            report["live"] = report.get("live") is True and report_job_alive(report)
            self._finished = True
            return report
        return self._poll_run_dir()

    def _poll_run_dir(self) -> dict[str, Any]:
        report_json = self.path / "report.json"
        running = self._job_running()
        if report_json.is_file() and not running:
            report = load_report_file(report_json)
            report["live"] = False
            report.setdefault("run_dir", str(self.path))
            self._finished = True
            return report
        attempt = current_attempt(self.path)
        followed = self.follower.poll(attempt) if running else None
        if followed is not None:
            return followed
        report = build_run_dir_report(attempt)
        report.setdefault("run_dir", str(self.path))
        if self.is_running is not None:
            report["live"] = running
        live = report.get("live")
        if not isinstance(live, bool):
            live = running
            report["live"] = live
        if not live:
            self._finished = self._grace_over()
        return report

    def _job_running(self) -> bool:
        if self.is_running is not None:
            return bool(self.is_running())
        return not (self.path / "report.json").is_file() and \
            traced_process_alive(current_attempt(self.path))

    def _grace_over(self) -> bool:
        """After the job ended without a report.json, keep polling a little while for it."""
        if self.is_running is None:
            return True
        if self._ended_at is None:
            self._ended_at = time.monotonic()
        return time.monotonic() - self._ended_at > FINAL_REPORT_GRACE_S


def current_attempt(run_dir: Path) -> Path:
    """The newest attempt's dir of a restarted job (torchrun --max-restarts), else the run
    dir itself: a live view follows the attempt that runs."""
    attempts = attempt_dirs(run_dir)
    return attempts[-1][1] if attempts else run_dir


def report_job_alive(report: dict[str, Any]) -> bool:
    """Does a rank of this report still run here?  A report written while its job ran
    (live) shows a finished job once that job is gone.  Ranks of other hosts cannot be
    checked: a report with no rank of this host keeps its word."""
    here = socket.gethostname()
    ranks = report.get("ranks")
    local = [r for r in ranks if isinstance(r, dict) and r.get("host") == here] \
        if isinstance(ranks, list) else []
    if not local:
        return True
    return any(alive(r["pid"]) for r in local if isinstance(r.get("pid"), int))


def traced_process_alive(run_dir: Path) -> bool:
    """Whether a process that wrote a trace in this run dir still exists on this host."""
    for ring in (run_dir / "traces").glob("pid-*.ring"):
        pid_text = ring.name[len("pid-") : -len(".ring")]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            return True
        except OSError:
            continue
        return True
    return False


def load_report_file(path: Path) -> dict[str, Any]:
    """The lead's load_report when it exists, else a minimal reader with the same errors."""
    try:
        from ddpdoctor.report.load import load_report
    except ImportError as exc:
        if not (exc.name or "").startswith("ddpdoctor.report"):
            raise
        return _read_report_json(path)
    return load_report(path)


def build_run_dir_report(run_dir: Path) -> dict[str, Any]:
    """The lead's build_report when it exists, else only a clear message."""
    if not is_run_dir(run_dir):
        raise UserError(
            f"{run_dir} is not a ddpdoctor run dir (no run.json or traces/ in it): "
            "give the directory `ddpdoctor run` wrote, or a report.json"
        )
    try:
        from ddpdoctor.report.build import build_report
    except ImportError as exc:
        if not (exc.name or "").startswith("ddpdoctor.report"):
            raise
        raise UserError(
            f"{run_dir} has no report.json yet and this ddpdoctor cannot build one: "
            "run `ddpdoctor analyze` on it first"
        ) from None
    return build_report(run_dir, live=True)


def _read_report_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a ddpdoctor report (not UTF-8 text)") from None
    if not text.strip():
        raise UserError(f"{path} is empty: the run may still be writing it, try again")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path} is not valid JSON (truncated?) at line {exc.lineno} column {exc.colno}: "
            "rebuild it with `ddpdoctor analyze RUN_DIR`"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        raise UserError(f'{path} is not a ddpdoctor report (no "schema": "{REPORT_SCHEMA}")')
    return data
