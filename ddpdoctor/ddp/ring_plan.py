"""The ring all-reduce's plan, the same on every rank: size settings, chunks, tags, ranks."""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import torch.distributed as dist


def env_bytes(name: str, default: int, minimum: int = 0) -> int:
    """A size in bytes from the environment variable ``name``: ``default`` when it is unset,
    not a whole number or below ``minimum`` (a rank never fails on a mistyped setting)."""
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value >= minimum else default


SEGMENT_BYTES = env_bytes("DDPDOCTOR_RING_SEGMENT_BYTES", 4 << 20, 1)
# Tensors up to this size, on two ranks, take the gather ring (n - 1 steps of one whole
# tensor) instead of reduce-scatter + all-gather (2 (n - 1) steps of segmented chunks):
# each message's latency (thread hand-offs), not the bytes, is the cost up to several MB,
# and inside a DDP step (backward on the same cores) up to 16 MB (bench/README.md).
GATHER_BYTES = env_bytes("DDPDOCTOR_RING_GATHER_BYTES", 16 << 20)
MIN_SPLIT_BYTES = 256 << 10  # chunks below twice this travel as one segment
TAG_BASE = 1 << 30  # far above the tags users pick, below gloo's 2**31 limit
_TAG_CALLS = 256  # calls whose tags differ before they repeat
_TAG_SPAN = 1 << 16  # tags one call may use: 2 * (n - 1) * segments

_calls: dict[int, itertools.count] = {}  # id(pg) -> call counter, for tags
_calls_lock = threading.Lock()


def chunk_bounds(numel: int, n: int) -> list[int]:
    """Start offsets of ``n`` chunks of ``numel`` elements plus the end (like tensor_split:
    the first ``numel % n`` chunks are one element longer)."""
    base, extra = divmod(numel, n)
    bounds = [0]
    for c in range(n):
        bounds.append(bounds[-1] + base + (1 if c < extra else 0))
    return bounds


def segment_span(bounds: list[int], seg: int, chunk: int, segment: int) -> tuple[int, int]:
    """``[start, end)`` of ``segment`` (``seg`` elements each) of ``chunk`` of ``bounds``;
    empty past the chunk's end."""
    start = bounds[chunk] + segment * seg
    end = min(bounds[chunk + 1], start + seg)
    return start, max(start, end)


def step_chunk(r: int, n: int, step: int, send: bool) -> int:
    """The chunk rank ``r`` of ``n`` sends (``send``) or receives at ``step`` of the
    segmented ring: reduce-scatter steps ``k < n - 1`` send ``r - k`` and receive
    ``r - k - 1`` (reduced in), all-gather steps send the chunk that became final and
    receive the next final one."""
    if step < n - 1:
        return (r - step if send else r - step - 1) % n
    step -= n - 1
    return (r + 1 - step if send else r - step) % n


def global_rank(pg: Any, group_rank: int) -> int:
    """The global rank of ``group_rank`` in ``pg``."""
    try:
        return dist.get_global_rank(pg, group_rank)
    except (RuntimeError, ValueError):
        return group_rank


class RingPlan:
    """Where each chunk and segment of a ring all-reduce lies, and which tag it travels
    under.  Pure arithmetic, the same on every rank."""

    def __init__(self, numel: int, n: int, rank: int, elem_size: int,
                 segment_bytes: int = SEGMENT_BYTES):
        self.n, self.rank = n, rank
        self.bounds = chunk_bounds(numel, n)
        self.max_chunk = -(-numel // n)
        # At least two segments a chunk (as gloo's ring does) once halves are worth a
        # message of their own: one segment is reduced while the next one travels.
        half = max(MIN_SPLIT_BYTES, -(-self.max_chunk // 2) * elem_size)
        seg = max(1, min(segment_bytes, half) // elem_size)
        steps = 2 * (n - 1)
        while steps * -(-self.max_chunk // seg) >= _TAG_SPAN:
            seg *= 2
        nseg = max(1, -(-self.max_chunk // seg))
        self.seg = max(1, -(-self.max_chunk // nseg))  # equal segments: no short last one
        self.nseg = nseg

    def span(self, chunk: int, segment: int) -> tuple[int, int]:
        """``[start, end)`` of ``segment`` of ``chunk``; empty past the chunk's end."""
        return segment_span(self.bounds, self.seg, chunk, segment)

    def tag(self, base: int, step: int, segment: int) -> int:
        return base + step * self.nseg + segment


def next_tag_base(pg: Any) -> int:
    """The first tag of the next ring call on ``pg``: calls take turns through
    ``_TAG_CALLS`` bases, in the order each rank makes them."""
    counter = _calls.get(id(pg))
    if counter is None:
        with _calls_lock:
            counter = _calls.setdefault(id(pg), itertools.count())
    return TAG_BASE + (next(counter) % _TAG_CALLS) * _TAG_SPAN


def uses_gather(nbytes: int, n: int, gather_bytes: int = GATHER_BYTES) -> bool:
    """Whether a tensor of ``nbytes`` on ``n`` ranks takes the gather ring: on two ranks
    both rings move the same bytes and the gather ring sends one message a rank where the
    other sends four or more; on more ranks it moves ``n / 2`` times the bytes in ``n - 1``
    times the messages, so its limit shrinks as ``n (n - 1)``."""
    return nbytes * n * (n - 1) <= 2 * gather_bytes
