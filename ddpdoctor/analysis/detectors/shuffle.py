"""stale_shuffle: a shuffling loader's sample order repeats from one epoch to the next.

Compared per rank and loader: the order digest of each complete epoch (``loader_end``),
else the batch fingerprints of the ring.  Only loaders whose sampler means to shuffle
(RandomSampler, DistributedSampler(shuffle=True), a sampler with ``shuffle=True``) count:
a sequential loader repeats its order by design.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.align.epochs import (EpochFacts, epochs_of, loader_name,
                                                        rank_list)
from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity

MIN_BATCHES = 2

FIX = ("Call `sampler.set_epoch(epoch)` at the start of every epoch (before iterating the "
       "DataLoader): DistributedSampler shuffles with seed + epoch, so without it every "
       "epoch sees the same order. A custom sampler or generator must be re-seeded with "
       "something that changes per epoch.")


def _same_order(a: EpochFacts, b: EpochFacts) -> bool:
    if a.end is not None and b.end is not None:
        n = a.end.get("batches")
        return (isinstance(n, int) and n >= MIN_BATCHES and n == b.end.get("batches")
                and a.end.get("order") is not None and a.end.get("order") == b.end.get("order"))
    pa, pb = a.fingerprints(), b.fingerprints()
    n = min(len(pa), len(pb))
    return n >= MIN_BATCHES and pa[:n] == pb[:n]


def _stale(run_epochs: dict[tuple[int, int], EpochFacts]) -> list[tuple[int, int]]:
    """(loader, epoch) of each epoch whose order repeats the previous epoch's."""
    out = []
    for (loader, epoch), facts in sorted(run_epochs.items()):
        prev = run_epochs.get((loader, epoch - 1))
        if prev is None or (facts.start or {}).get("shuffle") is not True:
            continue
        if _same_order(prev, facts):
            out.append((loader, epoch))
    return out


def detect(job: JobView) -> list[Finding]:
    hits: dict[int, list[tuple[int, int]]] = {}
    starts: dict[int, dict[str, Any]] = {}
    set_epochs: dict[int, list[int]] = {}
    for rank, run in sorted(job.ranks.items()):
        epochs = epochs_of(run)
        stale = _stale(epochs)
        if stale:
            hits[rank] = stale
            starts[rank] = epochs[stale[0]].start or {}
            set_epochs[rank] = [m.get("epoch") for m in run.trace.meta_events("set_epoch")]
    if not hits:
        return []
    ranks = tuple(sorted(hits))
    loader, epoch = hits[ranks[0]][0]
    start = starts[ranks[0]]
    sampler = start.get("sampler") or "the sampler"
    calls = set_epochs[ranks[0]]
    if start.get("sampler_epoch") is not None:
        why = (f"{sampler}.set_epoch was never called" if not calls else
               f"{sampler}.set_epoch was called with {sorted(set(calls))} only") + \
              f" (its epoch stayed {start['sampler_epoch']})"
    else:
        why = f"{sampler} produced the same order again"
    summary = (f"epoch {epoch} of {loader_name(start, loader)} repeats epoch {epoch - 1}'s sample "
               f"order on {rank_list(ranks)}: {why}")
    detail = ("Every epoch trains on the batches in the same order, which "
              "weakens shuffling (and with DistributedSampler each rank also keeps the "
              "same subset).\nRepeated epochs: " + "; ".join(
                  f"rank {r}: " + ", ".join(f"epoch {e}" for _, e in hs)
                  for r, hs in sorted(hits.items())) + ".")
    evidence = {"loader": loader, "site": start.get("site"), "epochs": {str(r): [e for _, e in hs]
                                             for r, hs in sorted(hits.items())},
                "sampler": start.get("sampler"), "set_epoch_calls": calls}
    return [Finding(FindingKind.STALE_SHUFFLE, Severity.WARNING, ranks, None, summary, detail, FIX,
                    evidence)]
