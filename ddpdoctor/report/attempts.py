"""The top-level report of a restarted job: the last attempt's, with every attempt listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.rundir.attempts import attempt_dirs


def attempt_entry(attempt: int, report: dict[str, Any], report_file: str) -> dict[str, Any]:
    """One line of ``attempts``: the attempt, its outcome and its report (relative path)."""
    return {"attempt": attempt, "outcome": report.get("outcome"), "report": report_file}


def with_attempts(last: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The last attempt's report with ``attempt`` (its number) and ``attempts`` (all)."""
    top = dict(last)
    top["attempt"] = attempts[-1]["attempt"] if attempts else 0
    top["attempts"] = list(attempts)
    return top


def describe_attempts(attempts: list[dict[str, Any]]) -> str:
    """One line for the console: "attempts: 0 failed; 1 completed"."""
    return "attempts: " + "; ".join(f"{e['attempt']} {e['outcome']}" for e in attempts)


def analyze_attempts(run_dir: Path, report_name: str = "report.analyzed.json"
                     ) -> tuple[dict[str, Any], list[tuple[Path, dict[str, Any]]]] | None:
    """Rebuild every attempt's report offline (``analyze`` of a restarted job's run dir):
    (the top-level report, [(attempt report path, attempt report)]), or None when
    ``run_dir`` has no attempts."""
    from ddpdoctor.report.build import build_report

    dirs = attempt_dirs(run_dir)
    if not dirs:
        return None
    written: list[tuple[Path, dict[str, Any]]] = []
    entries: list[dict[str, Any]] = []
    for attempt, path in dirs:
        report = build_report(path, live=False)
        report["attempt"] = attempt
        written.append((path / report_name, report))
        entries.append(attempt_entry(attempt, report, f"{path.name}/{report_name}"))
    return with_attempts(written[-1][1], entries), written
