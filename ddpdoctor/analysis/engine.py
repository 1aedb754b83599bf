"""analyze(job): the causal model's findings, then the silent-bug detectors' findings (a drift
that a root cause explains linked to it as its consequence)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ddpdoctor.analysis.causal.graph import Wait
from ddpdoctor.analysis.detectors.drift.consequence import link_drifts
from ddpdoctor.analysis.model import Finding, JobView, Severity

Detector = Callable[[JobView], list[Finding]]
SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def detectors() -> list[tuple[str, Detector]]:
    """Every detector to run beside the causal model: the built-ins and plugins'."""
    try:
        from ddpdoctor.plugins import registered_detectors
    except ImportError:
        from ddpdoctor.analysis.detectors import builtin_detectors

        return builtin_detectors()
    return registered_detectors()


def order(findings: list[Finding]) -> list[Finding]:
    """Errors, then warnings, then info (stable), with every ``caused_by`` re-pointed."""
    idx = sorted(range(len(findings)),
                 key=lambda i: SEVERITY_ORDER.get(findings[i].severity, 3))
    where = {old: new for new, old in enumerate(idx)}
    return [replace(findings[i], caused_by=None if findings[i].caused_by is None
                    else where.get(findings[i].caused_by)) for i in idx]


def analyze(job: JobView, problems: list[str] | None = None) -> list[Finding]:
    """All findings, root causes first (see ``analyze_with_waits``)."""
    return analyze_with_waits(job, problems)[0]


def analyze_with_waits(job: JobView, problems: list[str] | None = None
                       ) -> tuple[list[Finding], list[Wait]]:
    """All findings, root causes first.  The causal model decides root causes; detectors
    (built-in silent-bug detectors and plugins) add their findings.  A detector that raises
    is noted in ``problems`` (or job.problems) and skipped."""
    from ddpdoctor.analysis.explain import why
    from ddpdoctor.analysis.causal.diagnose import diagnose

    notes = problems if problems is not None else job.problems
    findings: list[Finding] = []
    waits: list[Wait] = []
    try:
        diagnosis = diagnose(job)
        findings, waits = why.explained(list(diagnosis.findings), job), diagnosis.waits
    except Exception as e:  # noqa: BLE001 - a bug in the model must not lose the report
        notes.append(f"causal analysis failed: {type(e).__name__}: {e}")
    for name, detect in detectors():
        try:
            found = detect(job)
        except Exception as e:  # noqa: BLE001 - a detector bug must not lose the report
            notes.append(f"detector {name} failed: {type(e).__name__}: {e}")
            continue
        findings.extend(found)
    return order(link_drifts(findings)), waits
