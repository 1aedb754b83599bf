"""duplicate_data: ranks processed identical batches (the data is not sharded).

Per training loader epoch (optimizer steps happened during it), the ranks' batch content
fingerprints (shape and a strided sample of the batch's first tensor) are compared
position by position; ranks whose batches agree on at least ``SAME_FRACTION`` of
``MIN_BATCHES`` or more batches processed the same data.  Sample indices are not
compared across ranks: each rank may index its own dataset (a hand-split tensor).
Random augmentation that differs per rank hides duplicates (a miss, never a false alarm).
"""

from __future__ import annotations

from ddpdoctor.analysis.align.epochs import (EpochFacts, job_epochs, loader_name,
                                                        rank_list, trained)
from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity

MIN_BATCHES = 2
SAME_FRACTION = 0.9

FIX = ("Shard the data across ranks: `DataLoader(ds, sampler=DistributedSampler(ds), ...)` "
       "(and `sampler.set_epoch(epoch)` each epoch), or make an IterableDataset read only "
       "its rank's shard (`rank::world_size`). With identical batches every rank computes "
       "the same gradients: N ranks do the work of one.")


def _digest(facts: EpochFacts) -> str | None:
    end = facts.end
    if end is not None and isinstance(end.get("content"), str) and \
            isinstance(end.get("batches"), int) and int(end["content"], 16) != 0:
        return f"{end['batches']}:{end['content']}"
    return None


def _same(a: EpochFacts, b: EpochFacts) -> tuple[bool, int]:
    da, db = _digest(a), _digest(b)
    if da is not None and db is not None and a.ran >= MIN_BATCHES:
        return da == db, a.ran
    pa, pb = a.fingerprints("content"), b.fingerprints("content")
    n = min(len(pa), len(pb))
    if n < MIN_BATCHES:
        return False, n
    equal = sum(x == y for x, y in zip(pa[:n], pb[:n]))
    return equal >= SAME_FRACTION * n, n


def detect(job: JobView) -> list[Finding]:
    for (loader, epoch), per in sorted(job_epochs(job).items()):
        ranks = [r for r, f in per.items() if trained(f, job.ranks[r])]
        if len(ranks) < 2:
            continue
        groups: list[list[int]] = []
        compared = 0
        for r in ranks:
            for g in groups:
                same, n = _same(per[g[0]], per[r])
                compared = max(compared, n)
                if same:
                    g.append(r)
                    break
            else:
                groups.append([r])
        dup = [g for g in groups if len(g) >= 2]
        if not dup:
            continue
        who = tuple(sorted(r for g in dup for r in g))
        start = per[who[0]].start or {}
        summary = (f"{rank_list(who)} processed identical batches in epoch {epoch} of "
                   f"{loader_name(start, loader)}: the data is not sharded")
        detail = (f"The batches had the same contents at the same positions ({compared} "
                  f"batches compared; sampler {start.get('sampler')}, dataset "
                  f"{start.get('dataset')}).\nEvery rank computes the same gradients, so "
                  "the job trains on one rank's worth of data at N times the cost.")
        evidence = {"loader": loader, "site": start.get("site"), "epoch": epoch,
                    "groups": [sorted(g) for g in dup], "compared": compared,
                    "sampler": start.get("sampler")}
        return [Finding(FindingKind.DUPLICATE_DATA, Severity.WARNING, who, None, summary, detail, FIX,
                        evidence)]
    return []
