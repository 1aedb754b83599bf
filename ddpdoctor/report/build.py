"""Build a report from run dirs: live (for the UI) or offline (`ddpdoctor analyze`)."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ddpdoctor.analysis.engine import analyze_with_waits
from ddpdoctor.analysis.load.fr_dumps import NOTHING_PENDING, dumps_alone
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.proc.table import live_state
from ddpdoctor.analysis.model import JobView
from ddpdoctor.rundir.lint_results import read_lint_results
from ddpdoctor.report import schema
from ddpdoctor.report.lint_match import mark_lint_seen
from ddpdoctor.report.stack_only import null_relative_seqs, stack_only_ranks
from ddpdoctor.trace.reader import TraceError, read_header_file


def infer_outcome(job: JobView) -> str:
    """completed | failed | hung from what the traces (and the supervisor's log) say; a
    live view of a job that still runs with nothing wrong so far: running; flight recorder
    dumps alone with nothing pending: running, with a note (they cannot tell more)."""
    if job.outcome in schema.OUTCOMES:
        return job.outcome
    states = set(schema.shown_states(job))
    if "hung" in states:
        return "hung"
    if states & {"failed", "killed"}:
        return "failed"
    if job.live and states - {"exited"}:
        return "running"  # nothing wrong so far
    if any(r.open_call() for r in job.ranks.values()):
        return "hung"
    if job.ranks and all(dumps_alone(r) for r in job.ranks.values()):
        job.problems.append(NOTHING_PENDING)  # a snapshot of a job: it ran when dumped
        return "running"
    return "completed"


LIVE_TAIL = 4096  # records a rank a live view reads: enough to align and show the recent
BIG_JOB_RECORDS = 2_000_000  # beyond this, records are matched by analysis.fast
BIG_JOB_TAIL = 8  # and only each rank's newest records (and each group's newest call)


def total_records(run_dirs: list[Path]) -> int:
    """How many records the run dirs' traces hold, from their headers alone."""
    total = 0
    for run_dir in run_dirs:
        for path in (run_dir / "traces").glob("pid-*.ring"):
            try:
                header = read_header_file(path)
            except TraceError:
                continue
            total += min(header.count, header.capacity)
    return total


def build_report(run_dir: Path | list[Path], live: bool = True,
                 hang_timeout: float | None = None, full: bool = False) -> dict[str, Any]:
    """The report of one run dir (or several, one per node) at this moment.  A live view
    reads each rank's newest LIVE_TAIL records unless ``full``.
    Raises UserError when a path is not a run dir."""
    dirs = run_dir if isinstance(run_dir, list) else [run_dir]
    if total_records(dirs) > BIG_JOB_RECORDS:
        from ddpdoctor.analysis.align.fast_scan import scanned  # numpy: only for big jobs

        # one pass over every record: the scan keeps each rank's tail and meta log
        with scanned(dirs, BIG_JOB_TAIL) as found, _collector_paused():
            job = load_job(dirs, live=live, hang_timeout=hang_timeout, tail=BIG_JOB_TAIL,
                           read=found.traces, probe=live_state if live else None)
            job.big = True
            findings, waits = analyze_with_waits(job)
            report = _report(job, findings, waits)
    else:
        job = load_job(dirs, live=live, hang_timeout=hang_timeout,
                       tail=LIVE_TAIL if live and not full else None,
                       probe=live_state if live else None)
        findings, waits = analyze_with_waits(job)
        report = _report(job, findings, waits)
    lint = read_lint_results(dirs[0])  # what `ddpdoctor run` linted before the start
    if lint is not None:
        report["lint"] = lint
        mark_lint_seen(report["findings"], lint)
    return report


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a big job's objects are built: each pass would
    walk every one of them (it tripled the time of 8,192 ranks); nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def fallback_report(outcome: str, error: BaseException, world_size: int,
                    started_ns: int) -> dict[str, Any]:
    """The report when the analysis failed: what is known beats none."""
    return {"schema": schema.SCHEMA, "outcome": outcome, "command": [],
            "world_size": world_size, "started_at": schema.iso(started_ns),
            "ended_at": schema.iso(time.time_ns()), "ranks": [], "findings": [],
            "problems": [f"analysis failed: {type(error).__name__}: {error}"]}


def _report(job: JobView, findings: list[Any], waits: list[Any]) -> dict[str, Any]:
    exit_code = next((e.get("exit_code") for e in reversed(job.supervisor_events)
                      if e.get("event") == "outcome"), None)
    report = schema.build(job, findings, infer_outcome(job),
                          exit_code if isinstance(exit_code, int) else None, waits=waits)
    null_relative_seqs(report, findings, stack_only_ranks(job))  # attach's run dir
    return report
