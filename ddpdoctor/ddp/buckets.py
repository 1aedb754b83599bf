"""Gradient buckets: which parameters share a flat buffer, and in which order they go out.

``assign_buckets`` is torch's ``compute_bucket_assignment_by_size`` in Python: walk the
parameters in the given order, keep one open bucket per dtype, close it when it holds at
least the current size limit (the first limit for the first bucket of a dtype, the next
one after).  ``Bucket`` is one flat buffer with a view per parameter.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Sequence

import torch

NO_LIMIT = sys.maxsize


@dataclass(frozen=True)
class ParamSpec:
    """What bucketing needs to know about a parameter."""

    numel: int
    element_size: int
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> "ParamSpec":
        return cls(t.numel(), t.element_size(), t.dtype)

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_size


def assign_buckets(params: Sequence[ParamSpec], limits: Sequence[int],
                   indices: Sequence[int] | None = None) -> list[list[int]]:
    """Group ``params`` into buckets by dtype and size.

    Args:
        params: the parameters, in the order they should fill buckets.
        limits: byte limits, the first for each dtype's first bucket, the last for the rest.
        indices: the parameter index of each entry of ``params`` (default: its position).
            When given, ``params`` is in gradient-ready order and buckets keep the order
            in which they were closed; otherwise they are sorted by their smallest index.

    Returns:
        Each bucket's parameter indices, in fill order.
    """
    if not limits:
        raise ValueError("assign_buckets needs at least one size limit")
    open_: dict[torch.dtype, tuple[list[int], int]] = {}  # dtype -> (indices, bytes)
    level: dict[torch.dtype, int] = {}
    result: list[list[int]] = []
    for pos, spec in enumerate(params):
        index = indices[pos] if indices is not None else pos
        members, size = open_.get(spec.dtype, ([], 0))
        members.append(index)
        size += spec.nbytes
        lvl = level.setdefault(spec.dtype, 0)
        if size >= limits[lvl]:
            result.append(members)
            open_.pop(spec.dtype, None)
            level[spec.dtype] = min(lvl + 1, len(limits) - 1)
        else:
            open_[spec.dtype] = (members, size)
    result.extend(members for members, _ in open_.values() if members)
    if indices is None:
        result.sort(key=min)
    return result


def initial_limits(find_unused: bool, first_cap: int, cap: int) -> list[int]:
    """Torch's limits for the buckets DDP starts with: one bucket for everything unless
    unused parameters are searched (then buckets are never rebuilt, so they are sized
    right away)."""
    if not find_unused:
        return [NO_LIMIT]
    return [first_cap, cap] if first_cap < cap else [cap]


@dataclass(eq=False)
class Bucket:
    """One flat gradient buffer and the parameters whose gradients live in it.

    ``params`` are indices into the DDP's parameter list; ``offsets[i]`` is where the
    gradient of ``params[i]`` starts in ``flat``.
    """

    index: int
    params: list[int]
    dtype: torch.dtype
    offsets: list[int]
    numels: list[int]
    flat: torch.Tensor
    views: list[torch.Tensor] = field(default_factory=list)
    pending: int = 0

    @classmethod
    def build(cls, index: int, params: list[int],
              tensors: Sequence[torch.Tensor]) -> "Bucket":
        offsets, numels, total = [], [], 0
        for i in params:
            offsets.append(total)
            numels.append(tensors[i].numel())
            total += tensors[i].numel()
        first = tensors[params[0]]
        flat = torch.zeros(total, dtype=first.dtype, device=first.device)
        views = [flat[o:o + n].view(tensors[i].shape)
                 for i, o, n in zip(params, offsets, numels)]
        return cls(index, list(params), first.dtype, offsets, numels, flat, views,
                   len(params))

    @property
    def nbytes(self) -> int:
        return self.flat.numel() * self.flat.element_size()

    def reset(self) -> None:
        self.pending = len(self.params)


@dataclass(frozen=True)
class Slot:
    """Where one parameter's gradient lives: bucket number and position in it."""

    bucket: int
    position: int


def build_buckets(groups: list[list[int]],
                  tensors: Sequence[torch.Tensor]) -> tuple[list[Bucket], list[Slot]]:
    """Flat buffers for ``groups`` (from ``assign_buckets``) and each parameter's slot."""
    buckets = [Bucket.build(b, g, tensors) for b, g in enumerate(groups)]
    slots: list[Slot | None] = [None] * len(tensors)
    for b in buckets:
        for pos, i in enumerate(b.params):
            slots[i] = Slot(b.index, pos)
    missing = [i for i, s in enumerate(slots) if s is None]
    if missing:
        raise ValueError(f"parameters {missing} are in no bucket")
    return buckets, slots  # type: ignore[return-value]
