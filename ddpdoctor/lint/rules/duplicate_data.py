"""A hand-made split of the data by world size but not by rank: every rank reads the same items."""

from __future__ import annotations

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.rules import Draft

KIND = "duplicate_data"
MESSAGE = "this split uses the world size but not the rank: every rank reads the same items"
FIX = ("shard by rank (data[rank::world]) or, better, use DistributedSampler, which also evens "
       "the shards")


def check(line: int) -> Draft:
    """Rule: a slice or range stepping by the world size must start from the rank."""
    return Draft(KIND, Severity.WARNING, line, "split", None, MESSAGE, FIX)
