"""DDP buckets that only torch's flight recorder saw, told apart and numbered.

Under ``ddpdoctor run --ddp torch`` on gloo, torch's reducer all-reduces the gradient
buckets on its own group and no Python runs per bucket (ddp/recorded_group.py,
``FlightRecordedBuckets``): the trace lacks them, the rank's flight recorder dump has them.
Once a dump is joined with the trace (flight_recorder.align), each all-reduce of one
floating tensor on such a DDP's group that the trace lacks is a bucket; they take the
record a recorded bucket has (BUCKET flag, bucket index in ``aux``, ``avg``).
"""

from __future__ import annotations

import dataclasses

from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.meta_line import traceback_frames
from ddpdoctor.trace.origin import Origin

EVENT = "ddp_buckets"  # the trace's word that a DDP's buckets are left to the recorder
UNKNOWN_LINE = "a backward pass (line not known: torch's flight recorder)"  # a bucket's site
FLOATING = ("float", "bfloat", "complex")
BACKWARD_FILES = ("torch/_tensor.py", "torch/autograd/__init__.py", "torch/autograd/graph.py")


BACKWARD = Origin.DDP_BACKWARD  # who issues a bucket


def _is_bucket(call: Call, untraced: str) -> bool:
    return call.callsite == untraced and call.op == "all_reduce" and \
        len(call.in_shapes) == 1 and bool(call.dtypes) and \
        all(d.startswith(FLOATING) for d in call.dtypes)


def _numel(call: Call) -> int:
    n = 1
    for d in call.in_shapes[0]:
        n *= d
    return n


def _events(run: RankRun, group: str) -> list[dict]:
    return [e for e in run.trace.meta_events(EVENT) if str(e.get("group")) == group]


def bucketed(run: RankRun, group: str) -> bool:
    """Did a DDP of ``run`` leave its buckets on ``group`` to the flight recorder?"""
    return bool(_events(run, group))


def backward_site(run: RankRun) -> tuple[str, bool]:
    """The user's line that runs backward now, and whether backward raised an error of a
    peer's absence: from the rank's stack (it waits inside backward) or from its
    exception's traceback (backward raised); ("", False) when neither says."""
    from ddpdoctor.analysis.load.frames import INTERNAL_PARTS
    from ddpdoctor.analysis.load.peer_errors import peer_absence

    exc = run.exception() or {}
    raised = not run.stack and bool(traceback_frames(exc))
    frames = list(run.stack or []) or list(reversed(traceback_frames(exc)))
    if not any(any(b in str(f.get("filename", "")) for b in BACKWARD_FILES) for f in frames):
        return "", False
    for frame in frames:
        name = str(frame.get("filename", ""))
        if name and not any(p in name for p in INTERNAL_PARTS):
            return f"{name}:{frame.get('line')}", raised and peer_absence(
                str(exc.get("message", "")))
    return "", False


def mark(run: RankRun, group: str, calls: list[Call], untraced: str) -> list[Call]:
    """``calls`` (one group's joined sequence of ``run``) with the recorder-only
    all-reduces of a bucketed DDP's group made buckets.  A backward pass's buckets are
    numbered from 0 and end when they have moved every parameter element of the DDP; a
    call the trace has (the user's, between two passes) starts the count afresh.  When the
    rank's backward raised for a peer's absence, its last bucket is the call that failed
    (the recorder retires a failed work as a completed one).  Their line: ``name_sites``."""
    events = _events(run, group)
    if not events:
        return calls
    totals = {e.get("numel") for e in events}
    total = totals.pop() if len(totals) == 1 else None  # several DDPs: no pass boundary
    total = total if type(total) is int and total > 0 else None
    out: list[Call] = []
    index = moved = 0
    for call in calls:
        if not _is_bucket(call, untraced):
            if call.callsite != untraced:
                index = moved = 0
            out.append(call)
            continue
        if total is not None and moved >= total:
            index = moved = 0
        out.append(dataclasses.replace(call, reduce_op="avg", aux=index, callsite=UNKNOWN_LINE,
                                       flags=call.flags | L.RecordFlag.BUCKET, origin=BACKWARD))
        index += 1
        moved += _numel(call)
    site, failed = backward_site(run)
    if failed and out and out[-1].callsite == UNKNOWN_LINE:
        out[-1] = dataclasses.replace(out[-1], flags=out[-1].flags | L.RecordFlag.FAILED)
    return out


def _is_marked(call: Call) -> bool:
    return bool(call.flags & L.RecordFlag.BUCKET) and call.callsite == UNKNOWN_LINE


def unmark_traced(ranks: dict[int, RankRun], merges: dict[int, list[Call]],
                  untraced: str) -> None:
    """On a rank whose recording failed (a ``runtime_error`` event: its trace stopped), a
    recorder-only all-reduce that another rank's trace holds as a call of its own with the
    same op, shapes and dtypes is that call, not a bucket: it takes the other's reduce op
    and origin, and its line stays unknown (``untraced``).  Elsewhere a bucket met by
    another rank's own call is a real mismatch, and stays one."""
    traced: dict[int, Call] = {}
    for calls in merges.values():
        for c in calls:
            if not c.flags & L.RecordFlag.BUCKET and c.callsite and c.seq not in traced:
                traced[c.seq] = c
    for rank, calls in merges.items():
        run = ranks.get(rank)
        if run is None or not run.trace.meta_events("runtime_error"):
            continue
        merges[rank] = [_as_traced(c, traced[c.seq], untraced)
                        if _is_marked(c) and c.seq in traced and _alike(c, traced[c.seq])
                        else c for c in calls]


def _alike(call: Call, theirs: Call) -> bool:
    return (call.op, call.in_shapes, call.dtypes) == (theirs.op, theirs.in_shapes,
                                                      theirs.dtypes)


def _as_traced(call: Call, theirs: Call, untraced: str) -> Call:
    return dataclasses.replace(call, reduce_op=theirs.reduce_op, aux=theirs.aux,
                               flags=call.flags & ~L.RecordFlag.BUCKET, callsite=untraced,
                               origin=theirs.origin)


def name_sites(ranks: dict[int, RankRun], merges: dict[int, list[Call]]) -> None:
    """Give the recorder's buckets in ``merges`` (rank -> joined calls) the user's backward
    line: the rank's own where its stack or exception tells it, else the job's where every
    rank that tells one tells the same.  The recorder does not say which line issued an
    earlier bucket: with one backward line (the common loop) each bucket gets its own;
    with several, an earlier bucket shows the line the rank is at now.  Every bucket of a
    rank gets one line, so that its repeating pattern of calls stays one pattern."""
    told = {r: backward_site(ranks[r])[0] for r in merges}
    sites = {s for s in told.values() if s}
    job_site = sites.pop() if len(sites) == 1 else ""
    for rank, calls in merges.items():
        site = told[rank] or job_site
        if site:
            merges[rank] = [dataclasses.replace(c, callsite=site)
                            if c.callsite == UNKNOWN_LINE else c for c in calls]
