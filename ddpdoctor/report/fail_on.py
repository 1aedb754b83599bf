"""`run --fail-on`: the exit status of a job that exited 0 but was found wrong (for CI)."""

from __future__ import annotations

from typing import Any

from ddpdoctor.config import FailOn

EXIT_FOUND = 1  # the job exited 0, but a finding of the --fail-on severity was named


def status_under_fail_on(status: int, report: dict[str, Any] | None,
                         fail_on: FailOn) -> tuple[int, str | None]:
    """The exit status, and the notice that says why it is not the job's: 1 when the job
    itself exited 0 (``status`` 0) but the report names a finding of ``fail_on``'s severity
    or worse; any other status (the job's own non-zero one, 124, 128+N) stands."""
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
