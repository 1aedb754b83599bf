"""The job's world size, from what its ranks' trace headers claim."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

MAX_WORLD_SIZE = 1 << 20  # more ranks than any job has had: a header claiming more is damaged
RANKS_PER_TRACE = 4096  # a world past this many ranks per trace present is not believed


def plausible_world(rank: int, world: int) -> bool:
    """A header's claim can be true: its world holds its own rank and is below the cap."""
    return 0 <= rank < world <= MAX_WORLD_SIZE


def world_size(claims: Iterable[tuple[int, int]]) -> int:
    """The world size from each rank's ``(rank, world_size)`` header: what most plausible
    claims say (on a tie, the smaller: damage more often inflates a number than shrinks it
    to another rank's), never fewer than the highest rank of a plausible claim plus one.
    0 with no plausible claim.

    A damaged header (a world size of 2**31, or a rank of a million in a world of 4) so
    counts for nothing, where the largest number would have had the analysis hold state for
    that many ranks.  Nor does a claim past ``RANKS_PER_TRACE`` ranks for each trace present
    (one header of a 3-rank job claiming a million ranks: 7 s and 517 MB of analysis); node
    0 of 1,024 nodes of 8 ranks, seeing its own 8 traces first, believes 8,192."""
    claims = list(claims)
    cap = RANKS_PER_TRACE * len(claims)
    plausible = [(rank, world) for rank, world in claims
                 if plausible_world(rank, world) and world <= cap]
    votes = Counter(world for _, world in plausible)
    said = min(votes, key=lambda w: (-votes[w], w)) if votes else 0
    return max([said, *(rank + 1 for rank, _ in plausible)])
