"""seed_collision: ranks drew identical random numbers during training.

The data probes fingerprint each rank's global RNG states (torch, numpy, python
``random``) at the first batches of training (``rng`` events): before each batch's fetch
and after it.  DataLoader workers say whether they consumed randomness, and from which
state (``worker_rng``).  Two kinds of draws are told apart:

- data draws (a bug): the fetch of a batch (dataset ``__getitem__``, collate) drew from a
  generator whose state was equal on two or more ranks, or workers of different ranks
  drew from equal states: every rank applies the same augmentations;
- step draws: between batches (dropout, random ops in the training step) a generator
  advanced from a state equal across ranks.  A warning when the user seeded every rank
  alike; info when a framework does it on purpose for an identical initial model
  (transformers' Trainer, Lightning's ``seed_everything``, accelerate's ``set_seed``),
  with the fix that fits that framework.

The sampler's own draws are neither (they come before the fetch: DistributedSampler and
accelerate shard one permutation drawn alike on every rank by design), and seeding the
model's initialisation alike leaves no trace here: states are compared at batch time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.align.epochs import rank_list
from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity
from ddpdoctor.frameworks import known

GENERATORS = ("torch", "numpy", "python")
NAMES = {"torch": "torch", "numpy": "numpy.random", "python": "python random"}
FIX = ("Seed each rank differently once the model is built: e.g. "
       "`torch.manual_seed(seed + rank); random.seed(seed + rank); "
       "np.random.seed(seed + rank)` after constructing the model (DDP broadcasts rank 0's "
       "parameters, so the model stays identical). For DataLoader workers, give the loader "
       "a per-rank generator: `DataLoader(..., generator=torch.Generator()"
       ".manual_seed(seed + rank))`.")


@dataclass
class Collisions:
    """What collided, by kind of draw: generator -> ranks (and the batch it was seen at)."""

    data: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    step: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    workers: tuple[tuple[int, ...], dict[str, Any]] | None = None
    framework: str | None = None


def _rng_by_batch(job: JobView) -> dict[int, dict[int, dict[str, Any]]]:
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for rank, run in job.ranks.items():
        for m in run.trace.meta_events("rng"):
            if isinstance(m.get("batch"), int):
                out.setdefault(rank, {})[m["batch"]] = m
    return out


def _equal_groups(states: dict[int, Any]) -> list[tuple[int, ...]]:
    """Ranks whose state is equal (two or more), per distinct state."""
    groups: dict[str, list[int]] = {}
    for rank, state in states.items():
        if state is not None:
            groups.setdefault(str(state), []).append(rank)
    return [tuple(sorted(g)) for g in groups.values() if len(g) >= 2]


def _add(found: dict[str, tuple[tuple[int, ...], int]], g: str, ranks: tuple[int, ...],
         batch: int) -> None:
    if g not in found or len(ranks) > len(found[g][0]):
        found[g] = (ranks, batch)


def _main_collisions(by_rank: dict[int, dict[int, dict[str, Any]]], out: Collisions) -> None:
    if len(by_rank) < 2:
        return
    points = sorted(set.intersection(*(set(b) for b in by_rank.values())))
    for b in points:  # data draws: the fetch of batch b drew from equal states
        for g in GENERATORS:
            drew = {r: m[b].get("fetch_before", {}).get(g) for r, m in by_rank.items()
                    if g in (m[b].get("fetch_drew") or [])}
            for ranks in _equal_groups(drew):
                _add(out.data, g, ranks, b)
    for a, b in zip(points, points[1:]):  # step draws: between batch a and batch b
        for g in GENERATORS:
            states = {}
            for r, m in by_rank.items():
                if b > a + 1 and any(g in (x.get("fetch_drew") or []) for x in m.values()):
                    continue  # the window holds fetches of its own, which draw
                after_a = m[a].get(g)
                before_b = (m[b].get("fetch_before") or m[b]).get(g)
                if after_a is not None and before_b is not None and after_a != before_b:
                    states[r] = after_a
            for ranks in _equal_groups(states):
                _add(out.step, g, ranks, b)
    legacy = not any("fetch_before" in m for per in by_rank.values() for m in per.values())
    if legacy and not out.step:  # events without fetch prints: states before batch 0
        _legacy_collisions(by_rank, points, out)


def _legacy_collisions(by_rank: dict[int, dict[int, dict[str, Any]]], points: list[int],
                       out: Collisions) -> None:
    """Batch 0's state against the last point's: a generator that advanced from an equal
    state (the draw's kind unknown: counted as step draws)."""
    later = [b for b in points if b > 0]
    if 0 not in points or not later:
        return
    k = later[-1]
    for g in GENERATORS:
        states = {r: m[k].get(g) for r, m in by_rank.items()
                  if m[0].get(g) is not None and m[0].get(g) != m[k].get(g)}
        for ranks in _equal_groups(states):
            _add(out.step, g, ranks, k)


def _worker_collisions(job: JobView) -> tuple[tuple[int, ...], dict[str, Any]] | None:
    """Workers of different ranks that drew from equal RNG states (their fingerprints;
    else, from older traces, the loader's equal base seed)."""
    consumed: dict[int, list[str]] = {}
    states: dict[tuple[int, str], dict[int, str]] = {}  # (worker, generator) -> rank -> state
    for rank, run in job.ranks.items():
        events = run.trace.meta_events("worker_rng")
        used = sorted({g for m in events for g in (m.get("consumed") or [])})
        if used:
            consumed[rank] = used
        for m in events:
            for g, state in (m.get("state") or {}).items():
                states.setdefault((int(m.get("worker") or 0), g), {}).setdefault(rank, state)
    if not consumed:
        return None
    if states:
        for (worker, g), per in sorted(states.items()):
            for ranks in _equal_groups(per):
                return ranks, {"worker": worker, "generator": g, "state": per[ranks[0]],
                               "consumed": {str(r): consumed.get(r, []) for r in ranks}}
        return None
    seeds: dict[tuple[Any, Any], dict[int, Any]] = {}
    for rank, run in job.ranks.items():
        for m in run.trace.meta_events("loader_epoch"):
            seed = m.get("worker_base_seed")
            if isinstance(seed, int):
                seeds.setdefault((m.get("loader"), m.get("epoch")), {})[rank] = seed
    for key, per in sorted(seeds.items(), key=lambda kv: str(kv[0])):
        for ranks in _equal_groups(per):
            if any(r in consumed for r in ranks):
                return ranks, {"loader": key[0], "epoch": key[1],
                               "worker_base_seed": per[ranks[0]],
                               "consumed": {str(r): consumed.get(r, []) for r in ranks}}
    return None


def collisions(job: JobView) -> Collisions:
    """Every collision of the job, by kind of draw."""
    by_rank = _rng_by_batch(job)
    out = Collisions()
    _main_collisions(by_rank, out)
    out.workers = _worker_collisions(job)
    frameworks = {m.get("framework") for per in by_rank.values() for m in per.values()}
    out.framework = next((f.name for f in known.ALL if f.name in frameworks), None)
    return out


def _draws_text(found: dict[str, tuple[tuple[int, ...], int]], where: str) -> str:
    gens = list(found)
    ranks = sorted({r for rs, _ in found.values() for r in rs})
    return (f"the {', '.join(NAMES[g] for g in gens)} RNG state"
            f"{'s were' if len(gens) > 1 else ' was'} identical on {rank_list(ranks)} "
            f"when {where}")


def detect(job: JobView) -> list[Finding]:
    c = collisions(job)
    if not c.data and not c.step and c.workers is None:
        return []
    ranks: set[int] = set()
    parts = []
    evidence: dict[str, Any] = {}
    if c.data:
        parts.append(_draws_text(c.data, "loading a batch drew from it (augmentation in "
                                         "the dataset or collate: the same on every rank)"))
        evidence["data_generators"] = {g: list(rs) for g, (rs, _) in c.data.items()}
    if c.step:
        parts.append(_draws_text(c.step, "the training step drew from it (dropout or random "
                                         "ops: the same masks on every rank)"))
        evidence["step_generators"] = {g: list(rs) for g, (rs, _) in c.step.items()}
    main = {**c.step, **c.data}
    for rs, _ in main.values():
        ranks.update(rs)
    if main:
        evidence["generators"] = {g: list(rs) for g, (rs, _) in main.items()}
        evidence["batch"] = max(b for _, b in main.values())
        evidence["torch_seed"] = {str(r): m.get(min(m), {}).get("torch_seed")
                                  for r, m in _rng_by_batch(job).items() if m}
    if c.workers is not None:
        wranks, wev = c.workers
        ranks.update(wranks)
        drawn = sorted({g for v in wev["consumed"].values() for g in v})
        parts.append(f"the DataLoader workers of {rank_list(wranks)} drew random numbers "
                     f"({', '.join(drawn)}) from the same state: their augmentations are the "
                     "same on every rank")
        evidence["workers"] = wev
    data_bug = bool(c.data) or c.workers is not None
    if c.framework:
        evidence["framework"] = c.framework
    by_design = not data_bug and c.framework is not None
    who = sorted(ranks)
    if by_design:
        summary = (f"{rank_list(who)} drew identical random numbers in the training step "
                   f"({c.framework} seeds every rank alike on purpose)")
    else:
        summary = f"{rank_list(who)} drew identical random numbers during training"
    text = "; ".join(parts)
    if by_design:
        note = (f"\n{c.framework} seeds every rank alike so that the model starts identical; "
                "the ranks train on different data, so equal dropout masks are harmless. "
                "Loading the data drew nothing alike (no augmentation repeats across ranks).")
    else:
        note = ("\nEqual seeds for the model's initialisation are fine; the randomness used "
                "while training should differ per rank, or every rank applies the same "
                "dropout masks and augmentations.")
    detail = text[:1].upper() + text[1:] + "." + note
    fix = known.seed_fix(c.framework) or FIX  # the framework's own (ddpdoctor/frameworks/)
    severity = Severity.INFO if by_design else Severity.WARNING
    return [Finding(FindingKind.SEED_COLLISION, severity, tuple(who), None, summary, detail, fix,
                    evidence)]
