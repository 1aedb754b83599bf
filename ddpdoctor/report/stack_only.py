"""Ranks known from stacks alone (`attach` with no flight recorder dump of the rank, and
`analyze` of its run dir): the stacks tell the call a rank is in, not its position in the
job's sequence of collectives nor its step, so the report keeps those null and a finding
on such ranks speaks of the current call."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ddpdoctor.analysis.model import Finding, JobView

RELATIVE_NOTE = ("\n(From stacks alone: a rank's current call is known, not its position in "
                 "the job's sequence of collectives, nor its step; flight recorder dumps the "
                 "job wrote to TORCH_FR_DUMP_TEMP_FILE<rank> would tell them.)")


def stack_only_ranks(job: JobView) -> set[int]:
    """The ranks of ``job`` whose seqs are relative (0: the call it is in now)."""
    return {rank for rank, run in job.ranks.items() if not run.seq_known}


def _unnumbered(text: str, seq: int) -> str:
    """``text`` without the relative seq that stacks alone gave (``all_reduce #0``)."""
    return re.sub(rf" #{seq}\b", "", text.replace(f"seq {seq}", "current call"))


def null_relative_seqs(report: dict[str, Any], findings: list[Finding],
                       ranks: set[int]) -> list[Finding]:
    """``report`` (built by report.schema) with the seqs and steps of ``ranks`` null and
    its findings speaking of the current call; returns the findings as reported."""
    if not ranks:
        return findings
    for entry in report["ranks"]:
        if entry["rank"] in ranks:
            entry["last_seq"] = entry["step"] = None
            if entry.get("current"):
                entry["current"]["seq"] = None
    for wait in report.get("waits") or []:
        if wait.get("rank") in ranks:
            wait["seq"] = None
    findings = [dataclasses.replace(
        f, seq=None, summary=_unnumbered(f.summary, f.seq),
        detail=_unnumbered(f.detail, f.seq) + RELATIVE_NOTE) if f.seq is not None else f
        for f in findings]
    report["findings"] = [f.to_dict() for f in findings]
    return findings
