"""A drift that another finding caused: that finding's consequence, never an error of its own.

When DDP's gradient averaging broke (a rank skipped the synced backward of an iteration, DDP's
reducer left an iteration's reduction unfinished: a parameter with no gradient, one ready
twice), the replicas step on different gradients and drift apart as a matter of course.  The
causal model names that break as a root cause; the drift seen after it is linked to it
(``caused_by``), takes its cause and fix from it, and is information.

A drift keeps its own error where its checks saw a cause of their own that no broken
averaging explains (a load or re-init on some ranks, requires_grad changed, optimizer
settings or scheduler steps that differ, a clip threshold that differs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ddpdoctor.kinds import ROOT_CAUSE_KINDS, FindingKind, Severity
from ddpdoctor.analysis.model import Finding

# the drift's own causes that a broken gradient averaging produces
ROOT_KINDS = frozenset(k.value for k in ROOT_CAUSE_KINDS)
FOLLOWS_A_BREAK = frozenset({"unsynced", "no_gradient", "gradient_changed",
                             "accumulated_twice", "written_in_place", "unknown"})


def broke_averaging_at(f: Finding) -> int | None:
    """The iteration (from 0, by optimizer steps) in which finding ``f`` says DDP's gradient
    averaging broke, else None."""
    ev = f.evidence
    skip = ev.get("skipped_iteration")
    if isinstance(skip, dict) and type(skip.get("iteration")) is int:
        return skip["iteration"]
    if ev.get("mechanism") in ("no_grad", "ready_twice"):  # DDP's reducer error
        it = ev.get("iteration")
        if type(it) is int:
            return it
        if isinstance(it, list) and it and all(type(i) is int for i in it):
            return min(it)
    return None


def _own_cause(drift: Finding) -> dict[str, Any] | None:
    causes = drift.evidence.get("causes") or []
    return causes[0] if causes and isinstance(causes[0], dict) else None


def _follows(drift: Finding, root: Finding) -> bool:
    """The drift follows from ``root``: root broke the averaging before the drift's first
    divergent check, on ranks of this DDP (or the drift's checks saw ranks run different
    numbers of synced backward passes, which root names)."""
    own = _own_cause(drift)
    if own is None or own.get("kind") not in FOLLOWS_A_BREAK:
        return False
    if own.get("kind") == "gradient_changed" and own.get("site"):
        return False  # a clip threshold that differs between ranks: the drift's own cause
    replicas = set(drift.evidence.get("replica_ranks") or drift.ranks)
    if not replicas & set(root.ranks):
        return False
    broke = broke_averaging_at(root)
    step = drift.evidence.get("step")
    if broke is not None and type(step) is int:
        return broke < step
    return own.get("kind") == "unsynced" and bool(set(own.get("ranks") or ()) & set(root.ranks))


def _kind(f: Finding) -> str:
    return str(getattr(f.kind, "value", f.kind))


def as_consequence(drift: Finding, root: Finding, index: int) -> Finding:
    """The drift as the consequence of finding ``index`` (``root``)."""
    kind = _kind(root)
    summary = drift.summary.split("; likely cause:", 1)[0]
    broke = broke_averaging_at(root)
    summary += f"; a consequence of the {kind} above" + (
        f" (DDP's gradient averaging broke in iteration {broke})" if broke is not None else
        " (ranks ran different numbers of synced backward passes)")
    first = drift.detail.split("\n", 1)[0]
    detail = (f"{first}\nThis follows from the {kind} named as the root cause: "
              f"{root.summary}. Once DDP's gradient averaging breaks, each rank steps on "
              "gradients the others did not share, and the replicas stay apart for the rest "
              "of the run; fixing the root cause keeps them identical.")
    evidence = {**drift.evidence, "cause": "consequence", "consequence_of": kind}
    return replace(drift, severity=Severity.INFO, summary=summary, detail=detail,
                   fix=root.fix, evidence=evidence, caused_by=index)


def link_drifts(findings: list[Finding]) -> list[Finding]:
    """Each replica_divergence error that follows from a root cause in ``findings``, made
    that root cause's consequence (the first root that explains it)."""
    roots = [(i, f) for i, f in enumerate(findings)
             if _kind(f) in ROOT_KINDS and f.severity == Severity.ERROR and f.caused_by is None]
    out = list(findings)
    for j, f in enumerate(findings):
        if _kind(f) != FindingKind.REPLICA_DIVERGENCE.value or f.severity != Severity.ERROR:
            continue
        for i, root in roots:
            if _follows(f, root):
                out[j] = as_consequence(f, root, i)
                break
    return out
