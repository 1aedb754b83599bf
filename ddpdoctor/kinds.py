"""Every kind of finding ddpdoctor names, and their severities: the one list the analysis,
the report, the catalogue and the UI read (docs/findings.md describes each)."""

from __future__ import annotations

import enum


class _Text(str, enum.Enum):
    """A str enum that reads as its value in text (``f"{kind}"`` is ``rank_failed``, on
    every Python: 3.12 formats a mixed-in enum by its name otherwise)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(_Text):
    """error: the job is broken (some ranks block, or it trains wrong); warning: it may be,
    or it trains wrong silently; info: worth knowing."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class FindingKind(_Text):
    """The kinds of the report's findings (a str: equal to the report's ``kind`` text, so a
    finding's ``kind`` may be either).  Root causes, decided by the causal model:"""

    COLLECTIVE_MISMATCH = "collective_mismatch"  # at one seq, ranks called differing calls
    MISSING_COLLECTIVE = "missing_collective"  # some ranks wait in a call others never enter
    UNEVEN_BATCHES = "uneven_batches"  # ranks ran different numbers of batches in an epoch
    RANK_FAILED = "rank_failed"  # a rank died while others ran or waited
    DEADLOCK = "deadlock"  # ranks wait on each other in a cycle
    NODE_LOST = "node_lost"  # a node stopped answering node 0
    STALLED_CALL = "stalled_call"  # every rank inside one matched call, none progresses
    # silent bugs, found by the detectors:
    SEED_COLLISION = "seed_collision"  # ranks drew identical random numbers
    STALE_SHUFFLE = "stale_shuffle"  # the data order repeats from one epoch to the next
    DUPLICATE_DATA = "duplicate_data"  # ranks processed identical batches
    STRAGGLER = "straggler"  # one rank reaches collectives consistently later
    REPLICA_DIVERGENCE = "replica_divergence"  # the replicas stopped being identical


ROOT_CAUSE_KINDS = frozenset({FindingKind.COLLECTIVE_MISMATCH, FindingKind.MISSING_COLLECTIVE,
                              FindingKind.UNEVEN_BATCHES, FindingKind.RANK_FAILED,
                              FindingKind.DEADLOCK, FindingKind.NODE_LOST,
                              FindingKind.STALLED_CALL})
# the kinds a catalogued bug may be named by (ddpdoctor/catalogue.py)
CATALOGUE_KINDS = tuple(k.value for k in FindingKind
                        if k not in (FindingKind.NODE_LOST, FindingKind.STALLED_CALL))
