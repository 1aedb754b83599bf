"""`run`'s last resort when ddpdoctor itself fails after the job started: the job stopped
(every process of it), a report written from what the run dir holds, the error said in one
line (its traceback kept in the run dir), exit status EXIT_OWN_ERROR."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from ddpdoctor.config import RunConfig
from ddpdoctor.proc.signals import say_to_stderr
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.build import build_report, fallback_report
from ddpdoctor.report.outcome import EXIT_OWN_ERROR
from ddpdoctor.rundir.layout import write_json_atomic

ERROR_LOG = "ddpdoctor-error.txt"  # the traceback of ddpdoctor's own error, in the run dir


def ended_by_own_error(error: Exception, config: RunConfig, run_dir: Path, report_path: Path,
                       started_ns: int, report_written: bool) -> int:
    """The job is stopped; keep the traceback, write the report unless one was written,
    say one line; returns EXIT_OWN_ERROR."""
    log = keep_traceback(error, run_dir)
    where = f" (traceback in {log})" if log is not None else ""
    if not report_written:
        _write_report(error, config, run_dir, report_path, started_ns)
    say_to_stderr(f"ddpdoctor: internal error, the job was stopped: "
                  f"{type(error).__name__}: {error}{where}; report: {report_path}")
    return EXIT_OWN_ERROR


def keep_traceback(error: BaseException, run_dir: Path) -> Path | None:
    """``error``'s traceback appended to RUN_DIR/ERROR_LOG; the file (None: not writable)."""
    log = run_dir / ERROR_LOG
    try:
        with log.open("a") as f:
            f.write("".join(traceback.format_exception(error)))
    except OSError:
        return None
    return log


def _write_report(error: Exception, config: RunConfig, run_dir: Path, report_path: Path,
                  started_ns: int) -> None:
    """What the run dir tells, as an interrupted run, with ddpdoctor's error as a problem."""
    try:
        report: dict[str, Any] = build_report(run_dir, live=False,
                                              hang_timeout=config.hang_timeout, full=True)
    except Exception as e:  # noqa: BLE001 - the same error may stand in the way: say so
        report = fallback_report("interrupted", e, 0, started_ns)
    report.update(outcome="interrupted", command=redact_argv(list(config.command)),
                  exit_code=EXIT_OWN_ERROR, live=False)
    report["problems"] = list(report.get("problems", [])) + [
        f"ddpdoctor's own error ended the supervision: {type(error).__name__}: {error}; "
        "the job was stopped"]
    try:
        write_json_atomic(report_path, report)
    except OSError as e:
        say_to_stderr(f"ddpdoctor: cannot write the report to {report_path}: "
                      f"{e.strerror or e}")
