"""Built-in silent-bug detectors: each turns a JobView into findings of one family.

They reach the analysis through the plugin hook ``register_detectors`` like any
third-party detector (this module is in ddpdoctor.plugins.DEFAULT_PLUGINS);
``builtin_detectors()`` lists them for code that runs without the plugin manager.
"""

from __future__ import annotations

from typing import Any, Callable

from ddpdoctor.analysis.model import Finding, JobView
from ddpdoctor.hookspecs import hookimpl

Detector = Callable[[JobView], list[Finding]]


def builtin_detectors() -> list[tuple[str, Detector]]:
    """(name, detector) of the silent-bug detectors that ship with ddpdoctor.  Root causes
    (mismatch, failure, missing, uneven, deadlock) are decided by analysis.causal."""
    from ddpdoctor.analysis.detectors import (duplicate, sampler_overlap, seeds, shuffle,
                                              straggler)
    from ddpdoctor.analysis.detectors.drift import finding as replica_divergence

    return [("seed_collision", seeds.detect), ("stale_shuffle", shuffle.detect),
            ("duplicate_data", duplicate.detect), ("sampler_overlap", sampler_overlap.detect),
            ("straggler", straggler.detect), ("replica_divergence", replica_divergence.detect)]


@hookimpl
def register_detectors(register: Any) -> None:
    for name, detect in builtin_detectors():
        register(name, detect)
