"""The lint rules, one a module; each turns facts the walker found into a finding draft."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.lint.collectives import Site
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


def severity_of(taint: Taint, site: Site | None = None) -> Severity:
    """An error when the rank decides on a definite path (operations lint knows, from the rank
    to the condition) and the call is a collective on every configuration; a warning when the
    path passes through what lint cannot see, when the call is a collective under some
    configurations only (a framework's save under FSDP or DeepSpeed), and for data, files,
    time, chance, exceptions."""
    certain = site is None or site.certain
    return Severity.ERROR if taint.is_rank() and certain else Severity.WARNING


def considered(sites: list[Site], taint: Taint) -> list[Site]:
    """The collectives a rule weighs (point-to-point ops differ by design): a call that is a
    collective under some configurations only counts where the rank decides; under data, files
    or time it would be two guesses in a row."""
    return [s for s in sites if not s.p2p and (s.certain or taint.kind == TaintKind.RANK)]


def because(taint: Taint) -> str:
    """Words for why the value differs, with the line it began to differ on, and what lint
    could not see on the way."""
    words = f"{DESCRIBE[taint.kind]} (line {taint.line})"
    words += ", through " + ", then ".join(taint.via) if taint.via else ""
    if taint.unseen:
        words += f", through {taint.unseen}, which lint cannot read"
    return words
