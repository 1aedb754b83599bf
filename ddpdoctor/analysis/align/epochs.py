"""A rank's loader epochs as the data probes recorded them (see docs/internals.md): the
``loader_epoch`` / ``loader_end`` meta events, the BATCH records and the header's batch
counts; read by the data detectors (uneven batches, stale shuffle, duplicate data)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.model import JobView, RankRun, ranks_text

EpochKey = tuple[int, int]  # (loader id, loader epoch)


@dataclass
class EpochFacts:
    """One loader epoch of one rank, from its meta events and BATCH records."""

    start: dict[str, Any] | None = None  # the loader_epoch event
    end: dict[str, Any] | None = None  # the loader_end event
    prints: list[tuple[int, str, str, int]] = field(default_factory=list)
    # (batch index, indices hex, contents hex, t ns) from the ring; "-" = not taken
    counted: int = 0  # batches drawn, by the header's loader-progress table (exact)

    @property
    def predicted(self) -> int | None:
        n = (self.start or {}).get("length")
        return n if isinstance(n, int) else None

    @property
    def ran(self) -> int:
        """Batches drawn so far (all of them once the epoch ended).  The ring may lack
        the latest BATCH records (the probes hold some back); the header's count does not."""
        if self.end is not None and isinstance(self.end.get("batches"), int):
            return self.end["batches"]
        return max(self.counted, max((p[0] for p in self.prints), default=-1) + 1)

    @property
    def ended(self) -> bool:
        return self.end is not None

    def fingerprints(self, what: str = "order") -> list[str]:
        """The epoch's batch fingerprints in order, from the ring, else from loader_end's
        first ones.  ``order``: the sample indices (else the contents); ``content``: the
        batch contents only.  Batches without such a fingerprint are left out."""
        pairs = [(p[1], p[2]) for p in sorted(self.prints)]
        if not pairs:
            pairs = [tuple(str(x).split(":", 1)) for x in (self.end or {}).get("first") or []
                     if ":" in str(x)]
        if what == "content":
            return [c for _, c in pairs if c != "-"]
        return [i if i != "-" else c for i, c in pairs if (i, c) != ("-", "-")]


def parse_batch_text(callsite: str) -> tuple[int, str, str] | None:
    """A BATCH record's text ``<loader>:<indices hex>:<contents hex>`` -> its parts."""
    parts = callsite.split(":")
    if len(parts) != 3 or not parts[0].lstrip("-").isdigit():
        return None
    return int(parts[0]), parts[1], parts[2]


def epochs_of(run: RankRun) -> dict[EpochKey, EpochFacts]:
    """Every loader epoch the rank started, keyed (loader, epoch)."""
    out: dict[EpochKey, EpochFacts] = {}
    for m in run.trace.meta:
        ev = m.get("event")
        if ev in ("loader_epoch", "loader_end") and isinstance(m.get("loader"), int) \
                and isinstance(m.get("epoch"), int):
            facts = out.setdefault((m["loader"], m["epoch"]), EpochFacts())
            if ev == "loader_epoch":
                facts.start = m
            else:
                facts.end = m
    for rec in run.batches:
        parsed = parse_batch_text(rec.callsite)
        if parsed is None or parsed[0] < 0:
            continue
        facts = out.setdefault((parsed[0], rec.aux), EpochFacts())
        facts.prints.append((rec.seq, parsed[1], parsed[2], rec.t_start))
    for count in run.trace.header.loaders:
        if count.loader >= 0:
            facts = out.setdefault((count.loader, count.epoch), EpochFacts())
            facts.counted = max(facts.counted, count.batches)
    return out


def job_epochs(job: JobView) -> dict[EpochKey, dict[int, EpochFacts]]:
    """(loader, epoch) -> rank -> facts, over every rank of the job."""
    per_rank = {rank: epochs_of(run) for rank, run in sorted(job.ranks.items())}
    same = _split_loaders(per_rank)
    out: dict[EpochKey, dict[int, EpochFacts]] = {}
    for rank, epochs in per_rank.items():
        for (loader, epoch), facts in epochs.items():
            out.setdefault((same.get(loader, loader), epoch), {})[rank] = facts
    return out


def _split_loaders(per_rank: dict[int, dict[EpochKey, EpochFacts]]) -> dict[int, int]:
    """Loader ids to merge: one loader built on different lines per rank (``if rank == 0:
    loader = DataLoader(a) else: DataLoader(b)``) and iterated at one line.  Ids seen on
    only some ranks merge when, at one iterating line, their rank sets are disjoint and
    together cover every rank."""
    ranks_of: dict[int, set[int]] = {}
    site_of: dict[int, str] = {}
    for rank, epochs in per_rank.items():
        for (loader, _), facts in epochs.items():
            ranks_of.setdefault(loader, set()).add(rank)
            if facts.start and facts.start.get("site"):
                site_of.setdefault(loader, str(facts.start["site"]))
    everyone = set(per_rank)
    by_site: dict[str, list[int]] = {}
    for loader, ranks in ranks_of.items():
        if ranks != everyone and loader in site_of:
            by_site.setdefault(site_of[loader], []).append(loader)
    out: dict[int, int] = {}
    for ids in by_site.values():
        sets = [ranks_of[i] for i in ids]
        if len(ids) > 1 and sum(map(len, sets)) == len(everyone) and \
                set().union(*sets) == everyone:
            out.update({i: min(ids) for i in ids})
    return out


def trained(facts: EpochFacts, run: RankRun) -> bool:
    """Did optimizer steps happen during this epoch (a training loader)?"""
    if facts.end is not None and isinstance(facts.end.get("steps"), int):
        return facts.end["steps"] > 0
    steps0 = (facts.start or {}).get("steps")
    return isinstance(steps0, int) and run.header.step > steps0


def _short(site: Any) -> str:
    path, _, line = str(site or "").rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else ""


def loader_name(start: dict[str, Any] | None, loader: int) -> str:
    """``the DataLoader created at train.py:40, iterated at train.py:88`` (either part
    where known, else its id)."""
    made, site = _short((start or {}).get("created")), _short((start or {}).get("site"))
    if made and site:
        return f"the DataLoader created at {made}, iterated at {site}"
    if made or site:
        return f"the DataLoader {'created' if made else 'iterated'} at {made or site}"
    return f"DataLoader #{loader}"


rank_list = ranks_text  # one wording of ranks for every finding
