"""Out-of-step alignment: where the ranks' sequences on one group went out of step.

Position alone pairs the ranks' n-th calls; when a rank made one call too many (or too
few) and the next calls happen to agree in op and shape, the sequences look aligned until a
mismatch shows up later, at an innocent line.  Here each rank's calls are keyed by what
must agree (the fingerprint) *and* where they come from (call site, issuing API), the ranks
with the same keys form one class, and each class is aligned with the largest one by an
edit alignment (most equal keys, then fewest gaps) over a window that starts at the first
key difference: the first gap is the extra or missing call.  A pure function over per-rank
call lists, so the object path and the vectorized scan (analysis/align/fast_scan.py) can both call it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from ddpdoctor.analysis.align.matcher import fingerprint
from ddpdoctor.analysis.model import Call

WINDOW = 256  # calls of each rank compared, from the first key difference on
BAND = 8  # the most calls one rank can be ahead of another inside the window
_MATCH = 1000  # an equal key outweighs any number of gaps in the window


def call_key(call: Call) -> tuple:
    """What must agree (the fields the fingerprint is made of, as recorded: cheaper than
    the fingerprint and never looser), and where the call comes from."""
    return (call.op, call.reduce_op, call.peer, call.dtypes, call.in_shapes,
            call.out_shapes, call.origin, call.callsite)


@dataclass(frozen=True)
class OutOfStep:
    """The earliest extra or missing call of a group.

    call: the call that ranks ``made_by`` made and ranks ``missed_by`` did not.
    culprits: the ranks blamed (``made_by`` when the call was one too many, else
    ``missed_by``); extra: whether the culprits made a call too many.
    seqs: per culprit rank, the seq at which it went out of step.
    probable: the only evidence is a call-site difference (the calls agree in op and
    shape everywhere the ranks were paired by position, and no branch condition says
    more).
    """

    group: str
    call: Call
    made_by: tuple[int, ...]
    missed_by: tuple[int, ...]
    culprits: tuple[int, ...]
    extra: bool
    seqs: dict[int, int]
    probable: bool


@dataclass(frozen=True)
class Gap:
    """The first gap of an alignment of ``other`` against ``ref`` (positions from the
    window's start): ``in_other`` when ``other`` has a call at ``j`` that ``ref`` lacks,
    else ``ref`` has a call at ``i`` that ``other`` lacks."""

    i: int
    j: int
    in_other: bool


def first_gap(ref: Sequence[Hashable], other: Sequence[Hashable],
              band: int = BAND) -> Gap | None:
    """The first gap of the best alignment of ``other`` against ``ref`` (most equal keys,
    then fewest gaps; the ends are free: either sequence may stop early), when that
    alignment pairs more equal keys than pairing by position does; else None."""
    n, m = len(ref), len(other)
    diagonal = sum(1 for a, b in zip(ref, other) if a == b)
    if n == 0 or m == 0:
        return None
    neg = -(1 << 60)
    # score[i][j]: best score of ref[:i] against other[:j], within the band
    score = [[neg] * (m + 1) for _ in range(n + 1)]
    score[0][0] = 0
    for i in range(n + 1):
        lo, hi = max(0, i - band), min(m, i + band)
        row = score[i]
        for j in range(lo, hi + 1):
            s = row[j]
            if s == neg:
                continue
            if i < n and j < m:
                d = s + (_MATCH if ref[i] == other[j] else 0)
                if d > score[i + 1][j + 1]:
                    score[i + 1][j + 1] = d
            if i < n and s - 1 > score[i + 1][j]:
                score[i + 1][j] = s - 1
            if j < m and s - 1 > row[j + 1]:
                row[j + 1] = s - 1
    ends = [(score[n][j], n, j) for j in range(m + 1)] + \
        [(score[i][m], i, m) for i in range(n + 1)]
    best, i, j = max(ends, key=lambda e: (e[0], -abs(e[1] - e[2])))
    if best // _MATCH + (1 if best % _MATCH else 0) <= diagonal:
        return None
    gaps: list[Gap] = []
    while i > 0 or j > 0:  # back from the end, pairs first: the gaps land early
        s = score[i][j]
        if i > 0 and j > 0 and score[i - 1][j - 1] != neg and \
                s == score[i - 1][j - 1] + (_MATCH if ref[i - 1] == other[j - 1] else 0):
            i, j = i - 1, j - 1
        elif i > 0 and score[i - 1][j] != neg and s == score[i - 1][j] - 1:
            i -= 1
            gaps.append(Gap(i, j, False))
        else:
            j -= 1
            gaps.append(Gap(i, j, True))
    return gaps[-1] if gaps else None


def _window(calls: list[Call], lo: int) -> list[Call]:
    return [c for c in calls if c.seq >= lo][:WINDOW]


def _first_key_difference(by_rank: dict[int, list[Call]], lo: int) -> int | None:
    """The smallest seq >= lo at which two ranks' calls have different keys."""
    seen: dict[int, tuple] = {}
    first = None
    for calls in by_rank.values():
        for c in calls:
            if c.seq < lo or (first is not None and c.seq >= first):
                continue
            k = seen.setdefault(c.seq, call_key(c))
            if k != call_key(c):
                first = c.seq
                break
    return first


def out_of_step(by_rank: dict[int, list[Call]], group: str, until_seq: int | None = None,
                condition: Callable[[str], str | None] = lambda site: None) -> OutOfStep | None:
    """The earliest extra or missing call of ``group`` at or before ``until_seq`` (the
    seq where the job hung or the calls first differed; None: the newest calls), found by
    aligning each class of ranks with the largest; None when position explains the calls
    as well.  ``condition(callsite)``: the rank-dependent branch around a call site, if
    any (the source says which side made a call on purpose)."""
    if len(by_rank) < 2:
        return None
    top = until_seq if until_seq is not None else max(
        (cs[-1].seq for cs in by_rank.values() if cs), default=0)
    lo = _first_key_difference(by_rank, max(0, top - WINDOW))
    if lo is None or lo > top:
        return None
    windows = {r: _window(cs, lo) for r, cs in by_rank.items()}
    classes: dict[tuple, list[int]] = {}
    for r in sorted(windows):
        classes.setdefault(tuple(call_key(c) for c in windows[r]), []).append(r)
    if len(classes) < 2:
        return None
    ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    ref_keys, ref_ranks = ordered[0]
    found = []
    for keys, ranks in ordered[1:]:
        gap = first_gap(ref_keys, keys)
        if gap is not None:
            found.append((gap.i, gap, keys, ranks))
    if not found:
        return _conditional_pair(windows, ordered, group, condition)
    gap = min(found, key=lambda f: (f[0], f[3][0]))[1]
    same = [f for f in found if f[1] == gap]
    others = tuple(sorted(r for f in same for r in f[3]))
    ref_calls, other_calls = windows[ref_ranks[0]], windows[others[0]]
    if gap.in_other:
        call, made_by, missed_by = other_calls[gap.j], others, tuple(ref_ranks)
    else:
        call, made_by, missed_by = ref_calls[gap.i], tuple(ref_ranks), others
    cond = condition(call.callsite)
    extra = _extra(by_rank, call, made_by, missed_by, cond is not None)
    culprits = made_by if extra else missed_by
    at = gap.j if gap.in_other else gap.i  # on the side that made the call
    seqs = {}
    for r in culprits:
        w = windows[r]
        k = at if extra else (gap.j if not gap.in_other else gap.i)
        seqs[r] = w[k].seq if k < len(w) else (w[-1].seq + 1 if w else lo)
    diagonal = zip(ref_calls, other_calls)
    probable = cond is None and all(fingerprint(a) == fingerprint(b) for a, b in diagonal)
    return OutOfStep(group, call, made_by, missed_by, culprits, extra, seqs, probable)


def _extra(by_rank: dict[int, list[Call]], call: Call, made_by: tuple[int, ...],
           missed_by: tuple[int, ...], conditional: bool) -> bool:
    """Was the call one too many on ``made_by`` (else one too few on ``missed_by``)?  A
    strict majority of 3+ ranks decides; else a rank-dependent branch around the call
    (made on purpose by some ranks); else whether the ranks that missed it make that
    call at other times (a regular call they skipped once) or never (an extra call)."""
    total = len(made_by) + len(missed_by)
    if total >= 3 and len(made_by) != len(missed_by):
        return len(made_by) < len(missed_by)
    if conditional:
        return True
    key = call_key(call)
    counts = Counter(call_key(c) for r in missed_by[:1] for c in by_rank[r])
    return counts[key] == 0


def _conditional_pair(windows: dict[int, list[Call]], ordered: list[tuple[tuple, list[int]]],
                      group: str, condition: Callable[[str], str | None]) -> OutOfStep | None:
    """No gap explains the calls better than position, but at the first key difference a
    call under a rank-dependent branch met another rank's call from elsewhere (same op and
    shape, another line): the conditional call went out of step there, and the two
    sequences came back in step by chance (DDP's forward skips its next buffer broadcast
    after one under no_grad, say)."""
    first = {ranks[0]: windows[ranks[0]][0] for _, ranks in ordered if windows[ranks[0]]}
    if len(first) < 2:
        return None
    conditional = [r for r, c in first.items() if condition(c.callsite)]
    plain = [r for r, c in first.items() if not condition(c.callsite)]
    if not conditional or not plain:
        return None
    a = first[conditional[0]]
    if any(fingerprint(a) != fingerprint(first[r]) for r in plain):
        return None  # a plain mismatch: the matcher tells it
    made = tuple(sorted(r for key, ranks in ordered for r in ranks
                        if windows[r] and windows[r][0].callsite == a.callsite))
    missed = tuple(sorted(r for r in windows if r not in made))
    return OutOfStep(group, a, made, missed, made, True, {r: a.seq for r in made}, False)
