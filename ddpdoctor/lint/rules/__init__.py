"""The lint rules, one a module; each turns facts the walker found into a finding draft."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.taint import DESCRIBE, Taint, TaintKind


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
    """An error when the rank decides; a warning for data, files, time, chance, exceptions."""
    return Severity.ERROR if taint.kind == TaintKind.RANK else Severity.WARNING


def because(taint: Taint) -> str:
    """Words for why the value differs, with the line it began to differ on."""
    words = f"{DESCRIBE[taint.kind]} (line {taint.line})"
    return words + (", through " + ", then ".join(taint.via) if taint.via else "")
