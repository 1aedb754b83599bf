"""The lint rules, one a module; each turns facts the walker found into a finding draft."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.taint import DESCRIBE, Taint


@dataclass(frozen=True)
class Draft:
    """A finding before the file, the condition's source and the ignore comments are known."""

    kind: str
    severity: Severity
    line: int
    collective: str
    condition_line: int | None
    message: str
    fix: str


def severity_of(taint: Taint) -> Severity:
    """An error when the rank decides on a definite path (operations lint knows, from the rank
    to the condition); a warning when the path passes through what lint cannot see, and for
    data, files, time, chance, exceptions."""
    return Severity.ERROR if taint.is_rank() else Severity.WARNING


def because(taint: Taint) -> str:
    """Words for why the value differs, with the line it began to differ on, and what lint
    could not see on the way."""
    words = f"{DESCRIBE[taint.kind]} (line {taint.line})"
    words += ", through " + ", then ".join(taint.via) if taint.via else ""
    if taint.unseen:
        words += f", through {taint.unseen}, which lint cannot read"
    return words
