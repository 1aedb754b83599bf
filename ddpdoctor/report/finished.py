"""The finished report of a supervised run: the report built from its run dir, completed in
one place with what only the supervisor knows (the command, the exit statuses, what it
stopped, the nodes, the attempt, an interruption)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpdoctor.proc.signals import OUTPUT_CLOSED
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.console import NEVER_INITIALIZED, NO_ACTIVITY
from ddpdoctor.report.outcome import RunEnd, final_outcome
from ddpdoctor.rundir.layout import free_bytes

FULL_BELOW_BYTES = 1 << 20  # a rank's trace needs more than this


@dataclass(frozen=True)
class RunFacts:
    """What the supervisor adds to the report built from the run dir.

    end: how the run (or the attempt) ended.  command: the user's command (redacted when
    written).  exit_code: ddpdoctor's exit status (None while the job still runs: the
    report written at a verdict under ``--on-hang wait``).  job_exit_code: the job's own
    status once ddpdoctor stepped in.  signum: the signal that ended an interrupted run.
    problems: ddpdoctor's own troubles while it watched (after the build's own).  stopped:
    what ddpdoctor's stop did (``proc.control.StopResult.as_dict``), or None.  nodes: node
    0's list of the job's nodes (many nodes), else None.  attempt: the attempt of a job
    torchrun restarts, else None.  over: the job is over (stopped, ended, or restarted):
    the report is no live view any more."""

    end: RunEnd
    command: tuple[str, ...]
    exit_code: int | None = None
    job_exit_code: int | None = None
    signum: int = 0
    problems: tuple[str, ...] = ()
    stopped: dict[str, Any] | None = None
    nodes: tuple[dict[str, Any], ...] | None = None
    attempt: int | None = None
    over: bool = True


def finish_report(built: dict[str, Any], facts: RunFacts, run_dir: Path) -> dict[str, Any]:
    """The report ``built`` from ``run_dir``, completed with ``facts``, its outcome settled
    by the outcome policy (report/outcome.py): a new dict (``built`` is left as it is, so
    one build can be finished twice: at a verdict, and once the job is over)."""
    report = dict(built)
    report["command"] = redact_argv(list(facts.command))
    report["exit_code"] = facts.exit_code
    report["problems"] = list(dict.fromkeys(report.get("problems", []) + list(facts.problems)))
    notes = list(report.get("notes", []))
    if not report["ranks"]:
        notes.append(no_activity_note(run_dir))
    if facts.end is RunEnd.INTERRUPTED:
        report["interrupted_by"] = signal.Signals(facts.signum).name
        notes.append(_interrupted_note(facts.signum))
    if notes:
        report["notes"] = notes
    report["outcome"] = final_outcome(facts.end, report["outcome"], report["findings"],
                                      facts.job_exit_code)
    if facts.over and facts.end.stepped_in:
        report["job_exit_code"] = facts.job_exit_code
    if facts.over:
        report["live"] = False
    if facts.stopped is not None:
        report["stopped"] = facts.stopped
    if facts.nodes is not None:
        report["nodes"] = list(facts.nodes)
    if facts.attempt is not None:
        report["attempt"] = facts.attempt
    return report


def _interrupted_note(signum: int) -> str:
    return ("interrupted by the user" if signum == signal.SIGINT else
            "interrupted: the output was closed" if signum == OUTPUT_CLOSED else
            f"interrupted by {signal.Signals(signum).name}")


def no_activity_note(run_dir: Path) -> str:
    """Why the report has no rank: the job never started torch.distributed, or its ranks
    could not write their traces (the run dir's file system is full)."""
    free = free_bytes(run_dir)
    if free is not None and free < FULL_BELOW_BYTES:
        return (f"{NO_ACTIVITY}: the file system of {run_dir} is full ({free // 1024} KiB "
                "free), so the ranks could not record and ran without diagnosis; free space "
                "there or pass --run-dir")
    return NEVER_INITIALIZED
