"""replica_divergence: the replicas of a DDP model stopped being identical.

Each rank fingerprints its DDP's parameters after scheduled optimizer steps (see
runtime/replica_watch.py); healthy DDP keeps them bit-identical, since every rank applies
the same averaged gradient with the same settings.  The first checked step where they differ
is an error naming the parameters, by how much, the deviating ranks (the majority tells
where there is one) and the likely cause.  Buffers that differ under
``broadcast_buffers=False`` (running statistics of each rank's own data) are information.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity, ranks_text
from ddpdoctor.analysis.detectors.drift.cause_kinds import Cause, CauseKind, listed, short_site
from ddpdoctor.analysis.detectors.drift.causes import likely_causes
from ddpdoctor.analysis.detectors.drift.compare import (Divergence, find_divergence, replicas_of,
                                                        settings_apart_from)
from ddpdoctor.analysis.detectors.drift.facts import ReplicaFacts, replica_facts

MAX_NAMED = 8
SETTINGS = (CauseKind.SCHEDULER, CauseKind.HYPERPARAMETERS)  # causes a settings print dates
BUFFER_FIX = ("Nothing to fix if the buffers are running statistics (BatchNorm): with "
              "broadcast_buffers=False each rank keeps its own. For one set of statistics, use "
              "broadcast_buffers=True or torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).")


def _amount(div: Divergence, names: tuple[str, ...]) -> str:
    parts = []
    for i in div.params[:3]:
        rel = div.relative.get(i)
        if rel is None:
            parts.append(f"{names[i]} (in its bits)")
        elif rel == 0:
            parts.append(f"{names[i]} (in its last bits: the norms agree)")
        else:
            parts.append(f"{names[i]} (norms {rel:.2g} apart, relative)")
    more = len(div.params) - 3
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _after(div: Divergence, step: int | None) -> str:
    """Where a check was taken: after an optimizer step, or as a training forward began
    (counted from 0) when no hooked optimizer holds the parameters."""
    if div.replicas.at == "forward":
        return f"before DDP forward {step}"
    return f"after step {step}"


def _since(div: Divergence) -> str:
    return (f"identical {_after(div, div.previous)}" if div.previous is not None else
            "the first check")


def _who(div: Divergence) -> str:
    if div.majority:
        return (f"{ranks_text(div.deviants)} deviate{'s' if len(div.deviants) == 1 else ''} "
                "from the majority")
    return f"no majority tells which rank deviates ({ranks_text(div.deviants)} differ)"


def _evidence(div: Divergence, causes: list[Cause]) -> dict[str, Any]:
    rep = div.replicas
    names = rep.names
    buffers = rep.sets[min(rep.sets)].buffers
    return {
        "step": div.step, "previous_check": div.previous, "checked_at": rep.at,
        "parameters": [names[i] for i in div.params[:MAX_NAMED]],
        "differing_parameters": len(div.params), "total_parameters": len(names),
        "buffers": [buffers[i] for i in div.buffers[:MAX_NAMED] if i < len(buffers)],
        "relative_difference": {names[i]: div.relative.get(i)
                                for i in div.params[:MAX_NAMED]},
        "majority": div.majority, "ddp": rep.ddp, "replica_ranks": list(rep.ranks), "ddp_site": rep.sets[min(rep.sets)].site,
        "broadcast_buffers": rep.sets[min(rep.sets)].broadcast_buffers,
        "cause": causes[0].kind.value if causes else None,
        "causes": [c.to_dict() for c in causes],
    }


def parameter_finding(div: Divergence, causes: list[Cause]) -> Finding:
    rep = div.replicas
    names = rep.names
    differing = [names[i] for i in div.params]
    cause = causes[0]
    apart = settings_apart_from(div) if cause.kind in SETTINGS else None
    since = _since(div) + (f"; the optimizer settings differ from step {apart} on"
                           if apart is not None else "")
    summary = (f"replicas drifted apart {_after(div, div.step)} ({since}): "
               f"{listed(differing)} differ{'s' if len(differing) == 1 else ''} between "
               f"{ranks_text(rep.ranks)}; likely cause: {cause.short}")
    built = short_site(rep.sets[min(rep.sets)].site)
    before = (f"had identical parameters on every rank {_after(div, div.previous)}"
              if div.previous is not None else "was checked for the first time")
    who = _who(div)
    lines = [
        f"The DDP model{(' built at ' + built) if built else ''} {before}; "
        f"{_after(div, div.step)}, {len(differing)} of {len(names)} parameters differ: "
        f"{_amount(div, names)}. {who[0].upper()}{who[1:]}.",
        f"Likely cause: {cause.text}.",
    ]
    others = [c for c in causes[1:] if c.kind != cause.kind]
    if others:
        lines.append("Also seen: " + "; ".join(c.text for c in others[:3]) + ".")
    lines.append("Healthy DDP keeps replicas bit-identical (every rank applies the same "
                 "averaged gradient with the same settings); from here on the ranks train "
                 "different models, and a checkpoint saved on rank 0 is only rank 0's.")
    evidence = _evidence(div, causes)
    if apart is not None:
        evidence["first_step"] = apart  # the first step taken with settings apart
    return Finding(FindingKind.REPLICA_DIVERGENCE, Severity.ERROR, div.deviants, None, summary,
                   "\n".join(lines), cause.fix, evidence)


def buffer_finding(div: Divergence) -> Finding:
    rep = div.replicas
    buffers = rep.sets[min(rep.sets)].buffers
    differing = [buffers[i] for i in div.buffers if i < len(buffers)]
    summary = (f"buffers {listed(differing)} differ between {ranks_text(rep.ranks)} "
               f"{_after(div, div.step)} (broadcast_buffers=False: each rank keeps its own)")
    detail = (f"The parameters are identical on every rank; {len(differing)} buffer"
              f"{'s' if len(differing) != 1 else ''} differ {_after(div, div.step)}. With "
              "DDP(..., broadcast_buffers=False) running statistics legitimately differ "
              "between ranks; evaluation on different ranks then gives different results.")
    return Finding(FindingKind.REPLICA_DIVERGENCE, Severity.INFO, rep.ranks, None, summary, detail,
                   BUFFER_FIX, _evidence(div, []))


def divergence_findings(facts: ReplicaFacts) -> list[Finding]:
    """One finding per DDP whose replicas differ (the first divergent check: after optimizer
    steps, else at forwards)."""
    out = []
    told: set[int] = set()
    for rep in replicas_of(facts):
        div = find_divergence(rep) if rep.ddp not in told else None
        if div is None:
            continue
        told.add(rep.ddp)
        if div.params:
            out.append(parameter_finding(div, likely_causes(div, facts)))
        else:
            out.append(buffer_finding(div))
    return out


def detect(job: JobView) -> list[Finding]:
    return divergence_findings(replica_facts(job))
