"""duplicate_data from the samplers' own facts: ranks whose DistributedSamplers shuffle with
different seeds draw overlapping shards.

A DistributedSampler gives each rank every ``num_replicas``-th index of one permutation of
the dataset, drawn from ``seed + epoch``: the shards partition the dataset only when every
rank draws the same permutation.  Seeded per rank (``seed=base + rank``, a clock, a rank's
own random draw), each rank takes its slice of a different permutation: in every epoch a
sample is in a given rank's shard with chance 1/R, independently, so about (1 - 1/R)^R of
the dataset is never drawn (a quarter with two ranks) and as much is drawn twice or more.
The data probes record each rank's sampler seed, epoch, rank and line
(``runtime/loader_facts.py``); nothing here looks at the batches' contents, so random
augmentation does not hide it.  A healthy job's samplers share one seed: no finding.
"""

from __future__ import annotations

from collections import Counter

from ddpdoctor.analysis.align.epochs import (EpochFacts, _short, job_epochs,
                                                        loader_name, rank_list, trained)
from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity, ranks_values

FIX = ("Give every rank's DistributedSampler the same seed (`DistributedSampler(ds, "
       "seed=args.seed)`, the same value on every rank; keep per-rank seeds for "
       "augmentation or dropout), and call `sampler.set_epoch(epoch)` each epoch.")


def never_drawn_share(replicas: int) -> float:
    """The expected share of the dataset no rank draws in an epoch when each of
    ``replicas`` ranks takes its slice of an independent permutation."""
    return (1 - 1 / replicas) ** replicas


def _seeds(per: dict[int, EpochFacts]) -> dict[int, int]:
    """rank -> its DistributedSampler's seed, for the ranks whose sampler shuffles."""
    out = {}
    for r, facts in per.items():
        start = facts.start or {}
        seed, replicas = start.get("sampler_seed"), start.get("num_replicas")
        if isinstance(seed, int) and isinstance(replicas, int) and replicas > 1 and \
                start.get("shuffle") is True:
            out[r] = seed
    return out


def _odd_ones(seeds: dict[int, int]) -> tuple[int, ...]:
    """The ranks whose seed differs from a strict majority's, else every rank (two ranks,
    or no seed held by more than half: none can be singled out)."""
    seed, count = Counter(seeds.values()).most_common(1)[0]
    if count * 2 > len(seeds):
        return tuple(sorted(r for r, s in seeds.items() if s != seed))
    return tuple(sorted(seeds))


def detect(job: JobView) -> list[Finding]:
    for (loader, epoch), per in sorted(job_epochs(job).items()):
        per = {r: f for r, f in per.items() if trained(f, job.ranks[r])}
        seeds = _seeds(per)
        if len(seeds) < 2 or len(set(seeds.values())) < 2:
            continue
        who = _odd_ones(seeds)
        start = per[who[0]].start or {}
        replicas = int(start.get("num_replicas") or len(seeds))
        share = round(100 * never_drawn_share(replicas))
        site = start.get("sampler_site")
        at = f" at {_short(site)}" if site else ""
        seeds_text = ranks_values(seeds)
        summary = (f"{rank_list(who)} seed their DistributedSampler differently{at} "
                   f"({seeds_text}): the shards overlap; each epoch about {share}% of the "
                   f"data is drawn twice or more and {share}% never")
        detail = (f"A DistributedSampler gives each rank its slice of one permutation of the "
                  f"dataset, drawn from seed + epoch; with a different seed on each rank "
                  f"the slices come from different permutations. In epoch {epoch} of "
                  f"{loader_name(start, loader)} the {replicas} ranks drew from "
                  f"{len(set(seeds.values()))} permutations: about {share}% of the "
                  f"samples are never drawn in an epoch, and as many are drawn twice or "
                  f"more. The job completes; it trains on less data than it thinks.")
        evidence = {"loader": loader, "epoch": epoch, "seeds": {str(r): s for r, s in
                                                                sorted(seeds.items())},
                    "site": site, "num_replicas": replicas,
                    "never_drawn_share": round(never_drawn_share(replicas), 3)}
        return [Finding(FindingKind.DUPLICATE_DATA, Severity.WARNING, who, None, summary, detail, FIX,
                        evidence)]
    return []
