"""ddpdoctor plugin: ``barrier_heavy``, a worked example of a third-party detector.

It flags a job whose ranks spend most of their collectives in ``barrier()`` (a common
leftover of debugging: a barrier per step costs a full synchronisation each time).
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.model import Finding, JobView, Severity
from ddpdoctor.hookspecs import hookimpl

MIN_BARRIERS = 20  # fewer than this is set-up and tear-down, not a habit
MIN_SHARE = 0.5  # barriers as a share of all collectives


def detect(job: JobView) -> list[Finding]:
    """One info finding when barriers are at least half of the collectives."""
    counts = {}
    for rank, run in job.ranks.items():
        calls = [c for group in run.calls.values() for c in group]
        barriers = sum(c.op in ("barrier", "monitored_barrier") for c in calls)
        if calls:
            counts[rank] = (barriers, len(calls))
    heavy = {r: (b, n) for r, (b, n) in counts.items()
             if b >= MIN_BARRIERS and b >= MIN_SHARE * n}
    if not heavy:
        return []
    b, n = heavy[min(heavy)]
    return [Finding(
        kind="barrier_heavy", severity=Severity.INFO, ranks=tuple(sorted(heavy)), seq=None,
        summary=f"{b} of {n} collectives are barriers",
        detail="Every barrier waits for the slowest rank; in a training loop they are "
               "rarely needed (collectives synchronise the ranks already).",
        fix="Remove barriers from the training loop; keep them around checkpoints or "
            "set-up only.",
        evidence={"barriers": {str(r): b for r, (b, _) in sorted(heavy.items())}})]


@hookimpl
def register_detectors(register: Any) -> None:
    register("barrier_heavy", detect)
