"""Built-in detectors: each turns a JobView into findings of one family."""

from __future__ import annotations

from typing import Callable

from ddpdoctor.analysis.model import Finding, JobView

Detector = Callable[[JobView], list[Finding]]


def builtin_detectors() -> list[tuple[str, Detector]]:
    """(name, detector) of every detector that ships with ddpdoctor, root causes first."""
    from ddpdoctor.analysis.detectors import failure, mismatch, missing

    return [("collective_mismatch", mismatch.detect), ("rank_failed", failure.detect),
            ("missing_collective", missing.detect)]
