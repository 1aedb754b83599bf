"""Run the detectors over a JobView and keep root causes over their symptoms."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ddpdoctor.analysis.model import Finding, JobView, Severity

Detector = Callable[[JobView], list[Finding]]
SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def detectors() -> list[tuple[str, Detector]]:
    """Every detector to run: the built-ins and those plugins register."""
    try:
        from ddpdoctor.plugins import registered_detectors
    except ImportError:
        from ddpdoctor.analysis.detectors import builtin_detectors

        return builtin_detectors()
    return registered_detectors()


def _explained(f: Finding, roots: list[Finding]) -> bool:
    """Is a missing_collective finding a symptom of a root cause found elsewhere?"""
    if f.kind != "missing_collective":
        return False
    absent = set(f.ranks) | set(int(r) for r in f.evidence.get("absent", {}))
    for root in roots:
        if root.kind == "collective_mismatch" and (root.seq is None or f.seq is None or
                                                   root.seq <= f.seq):
            if root.evidence.get("group") == f.evidence.get("group"):
                return True
        if root.kind in ("rank_failed", "uneven_batches") and absent & set(root.ranks):
            return True
    return False


def analyze(job: JobView, problems: list[str] | None = None) -> list[Finding]:
    """All findings, root causes first.  A detector that raises is noted in ``problems``
    (or job.problems) and skipped: one broken detector never loses the others' findings."""
    notes = problems if problems is not None else job.problems
    findings: list[Finding] = []
    for name, detect in detectors():
        try:
            findings.extend(detect(job))
        except Exception as e:  # noqa: BLE001 - a detector bug must not lose the report
            notes.append(f"detector {name} failed: {type(e).__name__}: {e}")
    roots = [f for f in findings if f.kind != "missing_collective"]
    kept = [_demote_symptom_of_uneven(_demote_crash_of_mismatch(f, roots), roots)
            for f in findings if not _explained(f, roots)]
    kept = [_demote_peer_symptoms(f, kept) for f in kept]
    return sorted(kept, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))


def _demote_peer_symptoms(f: Finding, kept: list[Finding]) -> Finding:
    """A rank_failed made only of "connection closed by peer" errors, when another error
    finding says why the peer left (it exited, ran out of batches, diverged): a symptom."""
    if f.kind != "rank_failed" or f.severity != Severity.ERROR:
        return f
    failures = f.evidence.get("failures") or []
    if not failures or not all(x.get("symptom") for x in failures):
        return f
    cause = next((k for k in kept if k is not f and k.severity == Severity.ERROR), None)
    if cause is None:
        return f
    return dataclasses.replace(
        f, severity=Severity.INFO,
        summary=f"{f.summary} (a consequence of the {cause.kind} of rank(s) "
                f"{', '.join(map(str, cause.ranks))})")


def _demote_crash_of_mismatch(f: Finding, roots: list[Finding]) -> Finding:
    """gloo aborts a rank (SIGABRT) on a size mismatch: that crash is the mismatch's symptom."""
    if f.kind != "rank_failed" or "SIGABRT" not in f.summary:
        return f
    mismatch = next((r for r in roots if r.kind == "collective_mismatch"), None)
    if mismatch is None:
        return f
    return dataclasses.replace(
        f, severity=Severity.INFO,
        summary=f"{f.summary} (a consequence of the collective mismatch at seq {mismatch.seq})")


def _demote_symptom_of_uneven(f: Finding, roots: list[Finding]) -> Finding:
    """Symptoms of ranks that ran different numbers of batches: a rank whose collective
    failed because a peer left the loop early (connection closed by peer), and the
    mismatch at the seq where the longer ranks wait for the next batch's collective
    while the shorter ones called what follows their loop."""
    uneven = next((r for r in roots if r.kind == "uneven_batches"
                   and r.severity == Severity.ERROR), None)
    if uneven is None or f.kind not in ("rank_failed", "collective_mismatch"):
        return f
    fewer = ", ".join(map(str, uneven.ranks))
    if f.kind == "rank_failed":
        failures = f.evidence.get("failures") or []
        if not failures or not all(x.get("symptom") for x in failures):
            return f
        why = f"a consequence of the uneven batches: rank(s) {fewer} left the loop early"
    else:
        if uneven.seq is None or f.seq != uneven.seq or \
                f.evidence.get("group") != uneven.evidence.get("group"):
            return f
        why = (f"a consequence of the uneven batches: rank(s) {fewer} left the loop and "
               "called what follows it")
    return dataclasses.replace(f, severity=Severity.INFO, summary=f"{f.summary} ({why})")
