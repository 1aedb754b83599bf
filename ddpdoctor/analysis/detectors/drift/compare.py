"""Replicas compared: the first checked step where a DDP's ranks hold different parameters (or,
under ``broadcast_buffers=False``, buffers), which ranks deviate, and by how much."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.detectors.drift.facts import Check, Print, ReplicaFacts, ReplicaSet


@dataclass(frozen=True)
class Replicas:
    """One DDP across its ranks: the sets they recorded and their checks by step (``at``
    ``step``: after optimizer steps; ``forward``: as training forwards began)."""

    ddp: int
    sets: dict[int, ReplicaSet]
    checks: dict[int, dict[int, Check]]  # step -> rank -> check
    at: str = "step"

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self.sets))

    @property
    def names(self) -> tuple[str, ...]:
        return self.sets[min(self.sets)].params


@dataclass(frozen=True)
class Divergence:
    """Where replicas first differ.

    step: the first checked step where they differ; previous: the last checked step before
    it where they were identical (None: the first check). params / buffers: indices that
    differ. deviants: the ranks outside the majority where one exists, else every rank.
    relative: per differing parameter, the largest relative difference of its norm from
    the majority's (None where the norms are not known).
    """

    replicas: Replicas
    step: int
    previous: int | None
    params: tuple[int, ...]
    buffers: tuple[int, ...]
    deviants: tuple[int, ...]
    majority: bool
    relative: dict[int, float | None]


def replicas_of(facts: ReplicaFacts) -> list[Replicas]:
    """Each DDP index whose ranks recorded the same parameter names (a model that differs
    between ranks fails DDP's construction check, named elsewhere): its checks after
    optimizer steps, then (where it has any) its checks at forwards."""
    by_ddp: dict[int, dict[int, ReplicaSet]] = {}
    for rank, sets in facts.sets.items():
        for s in sets:
            by_ddp.setdefault(s.ddp, {})[rank] = s
    out = []
    for ddp, sets in sorted(by_ddp.items()):
        names = {s.params for s in sets.values()}
        if len(sets) < 2 or len(names) != 1:
            continue
        by_at: dict[str, dict[int, dict[int, Check]]] = {"step": {}}
        for rank in sets:
            for c in facts.checks.get(rank, []):
                if c.ddp == ddp and len(c.params) == len(next(iter(names))):
                    by_at.setdefault(c.at, {}).setdefault(c.step, {})[rank] = c
        out.extend(Replicas(ddp, sets, checks, at) for at, checks in by_at.items()
                   if checks or at == "step")
    return out


def _differing(prints: dict[int, tuple[Print | None, ...]], n: int) -> list[int]:
    out = []
    for i in range(n):
        bits = {p[i][0] for p in prints.values() if i < len(p) and p[i] is not None}
        if len(bits) > 1:
            out.append(i)
    return out


def _groups(prints: dict[int, tuple[Print | None, ...]], i: int) -> dict[int, list[int]]:
    """bits -> ranks, for tensor ``i``."""
    out: dict[int, list[int]] = {}
    for rank, p in sorted(prints.items()):
        if i < len(p) and p[i] is not None:
            out.setdefault(p[i][0], []).append(rank)
    return out


def majority_bits(prints: dict[int, tuple[Print | None, ...]], i: int) -> int | None:
    """The bits more than half of the ranks share for tensor ``i``, else None."""
    groups = _groups(prints, i)
    n = sum(len(r) for r in groups.values())
    for bits, ranks in groups.items():
        if 2 * len(ranks) > n:
            return bits
    return None


def deviants_of(prints: dict[int, tuple[Print | None, ...]], indices: list[int]
                ) -> tuple[tuple[int, ...], bool]:
    """The ranks outside the majority of any differing tensor, and whether a majority told
    for each; without one, every rank."""
    out: set[int] = set()
    for i in indices:
        bits = majority_bits(prints, i)
        if bits is None:
            return tuple(sorted(prints)), False
        for b, members in _groups(prints, i).items():
            if b != bits:
                out.update(members)
    return tuple(sorted(out)), True


def relative_difference(prints: dict[int, tuple[Print | None, ...]], i: int) -> float | None:
    """The largest |norm - reference| / reference over the ranks, the reference being the
    majority's norm (else the lowest rank's)."""
    bits = majority_bits(prints, i)
    ref_rank = _groups(prints, i)[bits][0] if bits is not None else min(prints)
    ref = prints[ref_rank][i]
    if ref is None or ref[1] is None:
        return None
    worst = 0.0
    for p in prints.values():
        if i < len(p) and p[i] is not None and p[i][1] is not None:
            worst = max(worst, abs(p[i][1] - ref[1]) / max(abs(ref[1]), 1e-30))
    return worst


def find_divergence(rep: Replicas) -> Divergence | None:
    """The first checked step (two or more ranks checked it) where parameters differ, else
    the first where buffers differ under ``broadcast_buffers=False``; None: identical."""
    previous = None
    buffer_div: Divergence | None = None
    n = len(rep.names)
    for step in sorted(rep.checks):
        at = rep.checks[step]
        if len(at) < 2:
            continue
        prints = {r: c.params for r, c in at.items()}
        params = _differing(prints, n)
        if params:
            deviants, majority = deviants_of(prints, params)
            buffers = _buffer_diff(at)
            return Divergence(rep, step, previous, tuple(params), tuple(buffers), deviants,
                              majority, {i: relative_difference(prints, i) for i in params})
        buffers = _buffer_diff(at)
        if buffers and buffer_div is None:
            bprints = {r: c.buffers for r, c in at.items() if c.buffers is not None}
            deviants, majority = deviants_of(bprints, buffers)
            buffer_div = Divergence(rep, step, previous, (), tuple(buffers), deviants,
                                    majority, {})
        previous = step
    return buffer_div


def _buffer_diff(at: dict[int, Check]) -> list[int]:
    prints = {r: c.buffers for r, c in at.items() if c.buffers is not None}
    if len(prints) < 2:
        return []
    return _differing(prints, max(len(p) for p in prints.values()))


def _settings_at(timeline: list[tuple[int, int]], update: int) -> int | None:
    value = None
    for u, v in timeline:
        if u > update:
            break
        value = v
    return value


def settings_apart_from(div: Divergence) -> int | None:
    """The first update of the divergent window that the ranks took with optimizer settings
    that differ (a settings print is taken after each step: the settings it used), else
    None."""
    rep = div.replicas
    timelines: dict[int, list[tuple[int, int]]] = {}
    for step in sorted(rep.checks):
        for rank, c in rep.checks[step].items():
            timelines.setdefault(rank, []).extend(c.settings)
    if len(timelines) < 2:
        return None
    for u in range((div.previous or 0) + 1, div.step + 1):
        values = {_settings_at(t, u) for t in timelines.values()}
        if len(values) > 1 and None not in values:
            return u
    return None
