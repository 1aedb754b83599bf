"""seed_collision: ranks drew identical random numbers during training.

The data probes fingerprint each rank's global RNG states (torch, numpy, python
``random``) at the first batches of training (``rng`` events), and DataLoader workers say
whether they consumed randomness (``worker_rng``) next to their seed (the loader's
``worker_base_seed``).  A generator collides when, on two or more ranks:

- its state is equal at the same batch, and
- its state changed between batch 0 and that batch on those ranks (randomness is used
  during training: dropout, augmentation, random ops).

Seeding the model's initialisation alike on every rank is normal and leaves no trace
here: the states are compared at batch time, not at init, and a seed shared by ranks
that draw nothing during training is harmless.  Workers collide when their base seeds
are equal across ranks in the same loader epoch and the workers consumed randomness.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.detectors.uneven import rank_list
from ddpdoctor.analysis.model import Finding, JobView, Severity

GENERATORS = ("torch", "numpy", "python")
NAMES = {"torch": "torch", "numpy": "numpy.random", "python": "python random"}
FIX = ("Seed each rank differently once the model is built: e.g. "
       "`torch.manual_seed(seed + rank); random.seed(seed + rank); "
       "np.random.seed(seed + rank)` after constructing the model (DDP broadcasts rank 0's "
       "parameters, so the model stays identical). For DataLoader workers, give the loader "
       "a per-rank generator: `DataLoader(..., generator=torch.Generator()"
       ".manual_seed(seed + rank))`.")


def _rng_by_batch(job: JobView) -> dict[int, dict[int, dict[str, Any]]]:
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for rank, run in job.ranks.items():
        for m in run.trace.meta_events("rng"):
            if isinstance(m.get("batch"), int):
                out.setdefault(rank, {})[m["batch"]] = m
    return out


def _main_collisions(job: JobView) -> list[tuple[str, tuple[int, ...], int]]:
    """(generator, ranks, batch) for each generator whose consumed state is shared."""
    by_rank = _rng_by_batch(job)
    if len(by_rank) < 2:
        return []
    common = set.intersection(*(set(b) for b in by_rank.values()))
    later = sorted(b for b in common if b > 0)
    if 0 not in common or not later:
        return []
    k = later[-1]
    found = []
    for g in GENERATORS:
        groups: dict[str, list[int]] = {}
        for rank, batches in by_rank.items():
            first, last = batches[0].get(g), batches[k].get(g)
            if first is None or last is None or first == last:
                continue  # not used during training on this rank
            groups.setdefault(str(last), []).append(rank)
        for ranks in groups.values():
            if len(ranks) >= 2:
                found.append((g, tuple(sorted(ranks)), k))
    return found


def _worker_collisions(job: JobView) -> tuple[tuple[int, ...], dict[str, Any]] | None:
    consumed = {}
    for rank, run in job.ranks.items():
        used = sorted({g for m in run.trace.meta_events("worker_rng")
                       for g in (m.get("consumed") or [])})
        if used:
            consumed[rank] = used
    if not consumed:
        return None
    seeds: dict[tuple[int, int], dict[int, Any]] = {}
    for rank, run in job.ranks.items():
        for m in run.trace.meta_events("loader_epoch"):
            seed = m.get("worker_base_seed")
            if isinstance(seed, int):
                seeds.setdefault((m.get("loader"), m.get("epoch")), {})[rank] = seed
    for key, per in sorted(seeds.items(), key=lambda kv: str(kv[0])):
        groups: dict[int, list[int]] = {}
        for rank, seed in per.items():
            groups.setdefault(seed, []).append(rank)
        for seed, ranks in groups.items():
            if len(ranks) >= 2 and any(r in consumed for r in ranks):
                return tuple(sorted(ranks)), {
                    "loader": key[0], "epoch": key[1], "worker_base_seed": seed,
                    "consumed": {str(r): consumed.get(r, []) for r in sorted(ranks)}}
    return None


def detect(job: JobView) -> list[Finding]:
    main = _main_collisions(job)
    workers = _worker_collisions(job)
    if not main and workers is None:
        return []
    ranks: set[int] = set()
    parts = []
    evidence: dict[str, Any] = {}
    if main:
        gens = [g for g, _, _ in main]
        k = main[0][2]
        for g, rs, _ in main:
            ranks.update(rs)
        parts.append(f"the {', '.join(NAMES[g] for g in gens)} RNG state"
                     f"{'s were' if len(gens) > 1 else ' was'} identical on "
                     f"{rank_list(sorted(ranks))} at batches 0 to {k} and advanced during "
                     "training (dropout, augmentation or random ops drew the same numbers "
                     "on every rank)")
        evidence["generators"] = {g: list(rs) for g, rs, _ in main}
        evidence["batch"] = k
        seeds = {str(r): m.get(0, {}).get("torch_seed") for r, m in _rng_by_batch(job).items()}
        evidence["torch_seed"] = seeds
    if workers is not None:
        wranks, wev = workers
        ranks.update(wranks)
        drawn = sorted({g for v in wev["consumed"].values() for g in v})
        parts.append(f"the DataLoader workers of {rank_list(wranks)} got the same base seed "
                     f"({wev['worker_base_seed']}) in epoch {wev['epoch']} and drew random "
                     f"numbers ({', '.join(drawn)}): their augmentations are the same on "
                     "every rank")
        evidence["workers"] = wev
    who = sorted(ranks)
    summary = f"{rank_list(who)} drew identical random numbers during training"
    detail = "; ".join(parts).capitalize() + "." + (
        "\nEqual seeds for the model's initialisation are fine; the randomness used while "
        "training should differ per rank, or every rank applies the same dropout masks and "
        "augmentations.")
    return [Finding("seed_collision", Severity.WARNING, tuple(who), None, summary, detail,
                    FIX, evidence)]
