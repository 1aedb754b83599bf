"""The outcome policy of a supervised run: for each way a run (or one attempt of it) ends,
the outcome its report names and the exit status ddpdoctor returns, ``--fail-on`` included
(CONTRACT: exit status)."""

from __future__ import annotations

import enum
from typing import Any, Iterable

from ddpdoctor.config import FailOn
from ddpdoctor.proc.signals import exit_status as signal_exit_status

EXIT_HUNG = 124  # ddpdoctor stopped a hung job
EXIT_OWN_ERROR = 70  # ddpdoctor's own error stopped the job (sysexits EX_SOFTWARE)
EXIT_FOUND = 1  # the job exited 0, but a finding of the --fail-on severity was named


class RunEnd(str, enum.Enum):
    """How a supervised run (or one attempt of it) ended.

    ENDED: the job exited by itself; its own status stands.  HUNG: ddpdoctor judged it
    hung (then stopped it, or waited for it under ``--on-hang wait``).  INTERRUPTED: a
    signal (Ctrl-C, SIGTERM, SIGHUP) or a closed output ended the run.  RESTARTED:
    torchrun started the next attempt, so this attempt failed.  NODE0_SILENT: node 0
    stopped the job and sent no report: this node writes its own."""

    ENDED = "ended"
    HUNG = "hung"
    INTERRUPTED = "interrupted"
    RESTARTED = "restarted"
    NODE0_SILENT = "node0_silent"

    @property
    def stepped_in(self) -> bool:
        """Did ddpdoctor end the run (a verdict or a signal) rather than the job itself?
        Such a report keeps the job's own status apart (``job_exit_code``)."""
        return self in (RunEnd.HUNG, RunEnd.INTERRUPTED, RunEnd.NODE0_SILENT)


def recorded_outcome(end: RunEnd, job_exit_code: int | None = None) -> str | None:
    """The outcome the supervisor records (supervisor.jsonl) before the report is built from
    the run dir, which reads it back (a hung job's waiting ranks then show hung, and
    ``analyze`` rebuilds the same report).  None for an interrupted run: it is judged as a
    live view (a wait shorter than the hang timeout is no finding), then said interrupted."""
    if end is RunEnd.ENDED:
        return "completed" if job_exit_code == 0 else "failed"
    if end in (RunEnd.HUNG, RunEnd.NODE0_SILENT):
        return "hung"
    if end is RunEnd.RESTARTED:
        return "failed"
    return None


def final_outcome(end: RunEnd, built: str, findings: Iterable[dict[str, Any]],
                  job_exit_code: int | None = None) -> str:
    """The report's outcome once built: interrupted for an interrupted run; failed for a
    job that exited 0 yet has a finding of severity error (it trained wrong); else what
    the build inferred from the run dir (``built``)."""
    if end is RunEnd.INTERRUPTED:
        return "interrupted"
    if end is RunEnd.ENDED and job_exit_code == 0 and \
            any(f.get("severity") == "error" for f in findings):
        return "failed"
    return built


def exit_status(end: RunEnd, job_exit_code: int | None = None, signum: int = 0) -> int:
    """ddpdoctor's exit status: the job's own when it ended by itself (a job still running
    when the supervision ended: 1), 124 when ddpdoctor stopped a hung job (or node 0 did and
    said no other), 128 + ``signum`` when a signal or a closed output ended the run."""
    if end is RunEnd.INTERRUPTED:
        return signal_exit_status(signum)
    if end in (RunEnd.HUNG, RunEnd.NODE0_SILENT):
        return EXIT_HUNG
    return job_exit_code if job_exit_code is not None else 1


def status_under_fail_on(status: int, report: dict[str, Any] | None,
                         fail_on: FailOn) -> tuple[int, str | None]:
    """`run --fail-on` (for CI): the exit status, and the notice that says why it is not the
    job's: 1 when the job itself exited 0 (``status`` 0) but the report names a finding of
    ``fail_on``'s severity or worse; any other status (the job's own non-zero one, 124,
    128+N) stands."""
    if status != 0 or fail_on is FailOn.NEVER or not isinstance(report, dict):
        return status, None
    for number, f in enumerate(report.get("findings") or [], start=1):
        if isinstance(f, dict) and fail_on.fails(f.get("severity")):
            severity = str(f.get("severity"))
            return EXIT_FOUND, (f"exit {EXIT_FOUND} (--fail-on {fail_on.value}): the job "
                                f"exited 0, but finding {number} is "
                                f"{'an' if severity == 'error' else 'a'} {severity} "
                                f"({f.get('kind')})")
    return status, None
