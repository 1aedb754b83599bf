"""Iterations: a rank's training steps from its trace, and the iterations a rank skipped.

An iteration is one batch drawn from a recorded DataLoader (a BATCH record: loader, epoch,
batch index, time) and what the rank did until it drew the next: the training step's
collectives (DDP's gradient buckets when the job has them, else every collective).  A
rank that drew a batch and drew the next with no such collective in between while the
other ranks made them skipped that iteration; the data probes record an epoch's first
batches, so skips among those are seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.model import Call, JobView, RankRun
from ddpdoctor.trace import layout as L


@dataclass(frozen=True)
class Iteration:
    """One batch of one rank and the training collectives it made before the next one."""

    rank: int
    loader: int
    epoch: int
    batch: int
    index: int  # the rank's iteration (CallRecord.iteration: its recorded batches, from 0)
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class SkippedIteration:
    """Ranks that drew batch ``batch`` of ``epoch`` and made none of the collectives the
    other ranks made for it (``missed``: one of those, as made by a rank that did)."""

    ranks: tuple[int, ...]
    loader: int
    epoch: int
    batch: int
    index: int
    missed: Call


def _step_calls(run: RankRun, buckets: bool) -> list[Call]:
    calls = [c for cs in run.calls.values() for c in cs
             if not buckets or c.flags & L.RecordFlag.BUCKET]
    return sorted(calls, key=lambda c: c.t_start)


def _loader_of(batch_text: str) -> int | None:
    head = batch_text.split(":", 1)[0]
    return int(head) if head.lstrip("-").isdigit() else None


def iterations(run: RankRun, buckets: bool) -> list[Iteration]:
    """The rank's closed iterations (a batch followed by another of the same loader
    epoch), in order; ``buckets``: count only DDP gradient buckets as the step's calls.
    A call belongs to the iteration its record carries (trace/record.py: the batches the
    rank drew before it)."""
    by_iteration: dict[int, list[Call]] = {}
    for c in _step_calls(run, buckets):
        by_iteration.setdefault(c.iteration, []).append(c)
    batches = sorted((b for b in run.batches if b.iteration >= 0), key=lambda b: b.iteration)
    out = []
    for b, nxt in zip(batches, batches[1:]):
        loader = _loader_of(b.callsite)
        if (loader, b.aux) != (_loader_of(nxt.callsite), nxt.aux) or nxt.seq != b.seq + 1:
            continue
        out.append(Iteration(run.rank, loader or 0, b.aux, b.seq, b.iteration,
                             tuple(by_iteration.get(b.iteration, ()))))
    return out


def skipped_iterations(job: JobView) -> list[SkippedIteration]:
    """Iterations some ranks skipped while the others made their step's collectives,
    earliest first.  Only loaders whose iterations hold collectives on some rank count
    (an evaluation loader's do not)."""
    buckets = any(c.flags & L.RecordFlag.BUCKET for run in job.ranks.values()
                  for cs in run.calls.values() for c in cs[:64])
    table: dict[tuple[int, int, int], dict[int, Iteration]] = {}
    for r, run in job.ranks.items():
        for it in iterations(run, buckets):
            table.setdefault((it.loader, it.epoch, it.batch), {})[r] = it
    found = []
    for key, by_rank in sorted(table.items()):
        if len(by_rank) < 2:
            continue
        made = [it for it in by_rank.values() if it.calls]
        none = sorted(r for r, it in by_rank.items() if not it.calls)
        if made and none and len(none) < len(by_rank):
            first = by_rank[none[0]]
            found.append(SkippedIteration(tuple(none), key[0], key[1], key[2], first.index,
                                          made[0].calls[0]))
    return sorted(found, key=lambda s: (s.epoch, s.batch))
