"""Align the ranks' collective sequences per process group and find where they first differ."""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from ddpdoctor.analysis.model import Call

ROOTED = {"broadcast", "reduce", "gather", "scatter", "broadcast_object_list",
          "gather_object", "scatter_object_list"}


class MatchState(str, enum.Enum):
    """How two calls at the same seq compare (most telling first)."""

    MATCH = "match"
    CALL_MISMATCH = "call"  # several fields differ: two unrelated collectives met
    OP_MISMATCH = "op"
    REDUCE_OP_MISMATCH = "reduce op"
    ROOT_MISMATCH = "root rank"
    DTYPE_MISMATCH = "dtype"
    SIZE_MISMATCH = "shape"


def _numels(shapes: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(math.prod(s) for s in shapes)


def size_key(call: Call) -> tuple:
    """What must agree in size across ranks for this op (gloo's rules, per op)."""
    op = call.op
    if op in ("barrier", "monitored_barrier", "all_gather_object", "gather_object",
              "all_to_all", "all_to_all_single"):
        return ()
    if op in ("scatter", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
              "reduce_scatter_single"):
        return _numels(call.out_shapes)
    if op in ("all_gather", "gather"):
        return _numels(call.in_shapes)
    if op in ("all_gather_into_tensor", "_all_gather_base", "all_gather_single"):
        return _numels(call.in_shapes) + _numels(call.out_shapes)
    return _numels(call.in_shapes)


def compare(a: Call, b: Call) -> MatchState:
    """Do calls ``a`` and ``b`` (same group, same seq, different ranks) match?"""
    if a.op != b.op:
        return MatchState.OP_MISMATCH
    differs = []
    if a.reduce_op != b.reduce_op:
        differs.append(MatchState.REDUCE_OP_MISMATCH)
    if a.op in ROOTED and a.peer != b.peer:
        differs.append(MatchState.ROOT_MISMATCH)
    if a.op not in ("barrier", "monitored_barrier") and a.dtypes and b.dtypes and \
            a.dtypes[0] != b.dtypes[0]:
        differs.append(MatchState.DTYPE_MISMATCH)
    if size_key(a) != size_key(b):
        differs.append(MatchState.SIZE_MISMATCH)
    if not differs:
        return MatchState.MATCH
    if len(differs) > 1 and a.callsite != b.callsite:
        return MatchState.CALL_MISMATCH
    return differs[0]


def fingerprint(call: Call) -> tuple:
    """What must agree across ranks at the same seq, computed once per call (cached in the
    call's ``__dict__``, where the supervisor also puts fingerprints it looked up)."""
    fp = call.__dict__.get("fingerprint")
    if fp is None:
        fp = call.__dict__["fingerprint"] = (
            call.op, call.reduce_op, call.peer if call.op in ROOTED else -1,
            call.dtypes[:1] if call.op not in ("barrier", "monitored_barrier") else (),
            size_key(call))
    return fp


@dataclass(frozen=True)
class Divergence:
    """The first seq of ``group`` at which the ranks' calls differ.

    culprits: the ranks blamed (the minority by fingerprint with 3+ ranks; with two
    fingerprints in a tie, every rank).  state: what differs.
    """

    group: str
    seq: int
    calls: dict[int, Call]
    state: MatchState
    culprits: tuple[int, ...]
    majority: tuple[int, ...]


def blame(calls: dict[int, Call]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(culprits, majority): the ranks whose call differs from the strict majority's (more
    than half the ranks); with none (two ranks, an even split, three ways), every rank."""
    counts = Counter(fingerprint(c) for c in calls.values())
    (top, n), *rest = counts.most_common()
    if rest and 2 * n <= len(calls):  # no majority to trust
        return tuple(sorted(calls)), ()
    majority = tuple(sorted(r for r, c in calls.items() if fingerprint(c) == top))
    culprits = tuple(sorted(r for r, c in calls.items() if fingerprint(c) != top))
    return culprits, majority


def find_divergence(by_rank: dict[int, list[Call]], group: str,
                    start_seq: int = 0) -> Divergence | None:
    """The first seq >= start_seq where at least two ranks recorded differing calls."""
    index: dict[int, dict[int, Call]] = {}
    for rank, calls in by_rank.items():
        for c in calls:
            if c.seq >= start_seq:
                index.setdefault(c.seq, {})[rank] = c
    for seq in sorted(index):
        at = index[seq]
        if len(at) < 2:
            continue
        prints = {fingerprint(c) for c in at.values()}
        if len(prints) == 1:
            continue
        culprits, majority = blame(at)
        ref = at[majority[0]] if majority else at[min(at)]
        state = next((compare(ref, c) for c in at.values()
                      if compare(ref, c) != MatchState.MATCH), MatchState.OP_MISMATCH)
        return Divergence(group, seq, dict(sorted(at.items())), state, culprits, majority)
    return None
