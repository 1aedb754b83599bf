"""Bucket assignment matches torch's reducer, and bucket views alias one flat buffer."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ddpdoctor.ddp import buckets as B
from ddpdoctor.ddp.ring import RingPlan, chunk_bounds

MB = 1 << 20


def _tensors(spec: list[tuple[int, torch.dtype]]) -> list[torch.Tensor]:
    return [torch.empty(n, dtype=dt) for n, dt in spec]


MODELS = {
    "uniform": [(1000, torch.float32)] * 10,
    "big_and_small": [(300_000, torch.float32), (10, torch.float32), (700_000, torch.float32),
                      (5, torch.float32), (262_144, torch.float32), (1, torch.float32)],
    "mixed_dtypes": [(200_000, torch.float32), (200_000, torch.float64), (50, torch.float32),
                     (300_000, torch.float64), (400_000, torch.float32), (7, torch.float16)],
    "one": [(123, torch.float32)],
}
LIMITS = [[B.NO_LIMIT], [MB], [dist._DEFAULT_FIRST_BUCKET_BYTES, 2 * MB], [4096, 1 << 14],
          [1, 1]]


@pytest.mark.parametrize("limits", LIMITS, ids=str)
@pytest.mark.parametrize("model", list(MODELS))
def test_assignment_matches_torch(model: str, limits: list[int]) -> None:
    tensors = _tensors(MODELS[model])
    ours = B.assign_buckets([B.ParamSpec.of(t) for t in tensors], limits)
    theirs, _ = dist._compute_bucket_assignment_by_size(tensors, limits)
    assert ours == [list(b) for b in theirs]


@pytest.mark.parametrize("model", ["uniform", "big_and_small"])
def test_ready_order_assignment_matches_torch(model: str) -> None:
    tensors = _tensors(MODELS[model])
    order = list(reversed(range(len(tensors))))
    order[0], order[1] = order[1], order[0]
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES // 256, 1 << 14]
    ours = B.assign_buckets([B.ParamSpec.of(tensors[i]) for i in order], limits, indices=order)
    theirs, _ = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], limits,
                                                       [], order)
    assert ours == [list(b) for b in theirs]


def test_buckets_split_by_dtype() -> None:
    tensors = _tensors(MODELS["mixed_dtypes"])
    groups = B.assign_buckets([B.ParamSpec.of(t) for t in tensors], [B.NO_LIMIT])
    buckets, slots = B.build_buckets(groups, tensors)
    assert sorted((b.dtype for b in buckets), key=str) == sorted(
        [torch.float16, torch.float32, torch.float64], key=str)
    for i, t in enumerate(tensors):
        b = buckets[slots[i].bucket]
        assert b.dtype == t.dtype and b.views[slots[i].position].shape == t.shape


def test_views_alias_the_flat_buffer() -> None:
    tensors = [torch.zeros(2, 3), torch.zeros(4), torch.zeros(1, 1, 5)]
    buckets, slots = B.build_buckets([[2, 0, 1]], tensors)
    b = buckets[0]
    assert b.params == [2, 0, 1] and b.offsets == [0, 5, 11] and b.flat.numel() == 15
    b.views[slots[0].position].fill_(7.0)
    assert b.flat[5:11].eq(7.0).all() and b.flat[:5].eq(0).all()
    assert b.pending == 3


def test_initial_limits_follow_torch() -> None:
    assert B.initial_limits(False, MB, 25 * MB) == [B.NO_LIMIT]
    assert B.initial_limits(True, MB, 25 * MB) == [MB, 25 * MB]
    assert B.initial_limits(True, 25 * MB, 25 * MB) == [25 * MB]


def test_a_parameter_in_no_bucket_is_an_error() -> None:
    with pytest.raises(ValueError, match="in no bucket"):
        B.build_buckets([[0]], [torch.zeros(1), torch.zeros(1)])


@pytest.mark.parametrize("numel,n", [(10, 3), (2, 4), (0, 2), (7, 1), (1 << 20, 4)])
def test_ring_chunks_cover_the_tensor_like_tensor_split(numel: int, n: int) -> None:
    bounds = chunk_bounds(numel, n)
    sizes = [bounds[c + 1] - bounds[c] for c in range(n)]
    assert sizes == [t.numel() for t in torch.arange(numel).tensor_split(n)]


def test_ring_segments_tile_each_chunk() -> None:
    plan = RingPlan(numel=1001, n=3, rank=0, elem_size=4, segment_bytes=64)
    for c in range(3):
        spans = [plan.span(c, j) for j in range(plan.nseg)]
        covered = [i for s, e in spans for i in range(s, e)]
        assert covered == list(range(plan.bounds[c], plan.bounds[c + 1]))
    tags = {plan.tag(0, step, j) for step in range(4) for j in range(plan.nseg)}
    assert len(tags) == 4 * plan.nseg
