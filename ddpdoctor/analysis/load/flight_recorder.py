"""Join torch flight recorder dumps to the traces of a run dir: one sequence per rank and group.

A dump (read by fr_dumps.py) sees every collective torch issued, the trace only those the
patches saw but with the user's call sites: ``align`` merges the two on each rank's default
group, on every rank or on none.
"""

from __future__ import annotations

import bisect
import dataclasses
from pathlib import Path

from ddpdoctor.analysis.load import fr_buckets
from ddpdoctor.analysis.load.external import DEFAULT_GROUP
from ddpdoctor.analysis.load.fr_dumps import NO_CALLSITE, dump_files, load_dump
from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.errors import UserError
from ddpdoctor.trace import fr_files
from ddpdoctor.trace import layout as L

CLOCK_SLACK_NS = 100_000  # the trace's and the recorder's wall-clock stamps of one call
SAME_OP = {"_all_gather_base": "all_gather_into_tensor",
           "_reduce_scatter_base": "reduce_scatter_tensor"}


GATHERS = {"all_gather", "all_gather_into_tensor"}  # a functional all_gather on gloo is
# recorded by torch as its list ``allgather``


def _same_op(a: str, b: str) -> bool:
    a, b = SAME_OP.get(a, a), SAME_OP.get(b, b)
    return a == b or {a, b} <= GATHERS


def _is_object(call: Call) -> bool:
    return bool(call.flags & L.RecordFlag.OBJECT) or call.op.endswith(("_object",
                                                                       "_object_list"))


def _created_during(entry: Call, call: Call) -> bool:
    return entry.t_start >= call.t_start - CLOCK_SLACK_NS and \
        (call.open or entry.t_start <= call.t_end + CLOCK_SLACK_NS)


def _is_entry_of(entry: Call, call: Call) -> bool:
    """Can the recorder's ``entry`` be the traced ``call``?  Same op, and created while the
    call ran: the trace stamps a call before it enters torch, the recorder inside it (both
    on the wall clock), so a direct process-group call just before it is not taken for it.
    An object collective is its first collective (of any op) created while it ran."""
    if _is_object(call):
        return bool(entry.t_start and call.t_start) and _created_during(entry, call)
    if not _same_op(entry.op, call.op):
        return False
    if not entry.t_start or not call.t_start:
        return True
    return _created_during(entry, call)


def align(traced: list[Call], recorded: list[Call]) -> list[Call] | None:
    """One group's sequence of a rank from its trace and its flight recorder entries: the
    trace's calls (with their call sites) renumbered to the recorder's seqs, and the
    recorder's calls that the trace lacks (collectives the patches did not see) added.
    When the recorder's ring wrapped (its first entry is not the group's first call), the
    sequence is the recorder's window: the traced calls that ended before it are left out
    (their seqs are not known).  An object collective takes the seq of its first entry and
    the entries created while it ran (the sizes, then the pickled bytes) go with it, on
    every rank alike.  None when they cannot be aligned: a traced call (a ring all-reduce
    of ddpdoctor's DDP) has no recorder entry."""
    if not recorded:
        return None
    if recorded[0].seq != 0:
        first = recorded[0].t_start - CLOCK_SLACK_NS
        traced = [c for c in traced if c.open or not c.t_end or c.t_end >= first]
    merged: list[Call] = []
    i = 0
    for n, call in enumerate(traced):
        while i < len(recorded) and not _is_entry_of(recorded[i], call):
            merged.append(recorded[i])
            i += 1
        if i < len(recorded):
            merged.append(dataclasses.replace(call, seq=recorded[i].seq))
            i += 1
            while _is_object(call) and i < len(recorded) and \
                    _created_during(recorded[i], call):  # its sizes, then its bytes
                i += 1
        elif n == len(traced) - 1 and call.open:  # entered after the recorder's dump
            merged.append(dataclasses.replace(call, seq=merged[-1].seq + 1 if merged else 0))
        else:
            return None
    return merged + recorded[i:]


def join_run_dir_dumps(run_dir: Path, ranks: dict[int, RankRun]) -> list[str]:
    """Join RUN_DIR/flight_recorder/ dumps into the traced ranks' default-group sequence
    (see ``align``), on every rank or on none: a rank joined and another not would count
    the same call under different seqs.  Returns notes for the report's problems."""
    directory = fr_files.dump_dir(run_dir)
    if not directory.is_dir():
        return []
    notes: list[str] = []
    merges: dict[int, list[Call]] = {}
    unjoined: list[int] = []
    for path in dump_files(directory):
        try:
            dump = load_dump(path)
        except UserError as e:
            notes.append(str(e))
            continue
        run = ranks.get(dump.rank)
        if run is None or run.ring_steps:
            # ddpdoctor's ring DDP moves buckets as point-to-point messages, which torch's
            # recorder numbers apart from the trace's all_reduces: the trace is the sequence.
            continue
        group = run.default_group()
        merged = align(run.calls.get(group, []), dump.calls.get(DEFAULT_GROUP, []))
        if merged is not None:  # --ddp torch's buckets, which only the recorder saw
            merged = fr_buckets.mark(run, group, merged, NO_CALLSITE)
        if merged is None:
            notes.append(f"rank {dump.rank}: the flight recorder's sequence does not align "
                         "with the trace's; the trace alone is used")
            unjoined.append(dump.rank)
        else:
            merges[dump.rank] = merged
    added = {r: len(m) - len(ranks[r].calls.get(ranks[r].default_group(), []))
             for r, m in merges.items()}
    unjoined += [r for r, run in ranks.items() if r not in merges and r not in unjoined
                 and not run.ring_steps]
    if unjoined and any(added.values()):
        notes.append(f"flight recorder: rank(s) {', '.join(map(str, sorted(unjoined)))} have "
                     "no dump that aligns with their trace: every rank's trace alone is used, "
                     "so that their seqs count alike")
        return notes
    fr_buckets.unmark_traced(ranks, merges, NO_CALLSITE)
    fr_buckets.name_sites(ranks, merges)
    for rank, merged in merges.items():
        run = ranks[rank]
        group = run.default_group()
        run.calls[group] = with_iterations(run, merged)
        # (--ddp torch left its buckets and its reducer's own calls to the recorder: not news)
        if added[rank] and not fr_buckets.bucketed(run, group):
            notes.append(f"rank {rank}: {added[rank]} collective(s) on group {group} seen "
                         "only by torch's flight recorder")
    return notes


def with_iterations(run: RankRun, calls: list[Call]) -> list[Call]:
    """``calls`` of ``run`` made outside its trace (torch's flight recorder) with the
    iteration a traced call there would carry: the rank's batches drawn before it."""
    starts = sorted((b.t_start, b.iteration) for b in run.batches if b.iteration >= 0)
    if not starts:
        return calls
    times = [t for t, _ in starts]
    out = []
    for c in calls:
        if c.iteration < 0 and c.t_start:
            at = bisect.bisect_right(times, c.t_start) - 1
            if at >= 0:
                c = dataclasses.replace(c, iteration=starts[at][1])
        out.append(c)
    return out
