"""The ring's arithmetic: chunks, segments, tags and which ring a tensor takes."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from ddpdoctor.ddp import ring, ring_plan


@pytest.mark.parametrize("numel,n", [(1, 2), (3, 2), (1001, 3), (65537, 4), (25 << 20, 2)])
def test_segments_tile_every_chunk_once(numel: int, n: int) -> None:
    plan = ring_plan.RingPlan(numel, n, 0, 4, segment_bytes=4096)
    for c in range(n):
        spans = [plan.span(c, j) for j in range(plan.nseg)]
        covered = [i for s, e in spans for i in range(s, e)] if numel < 100_000 else None
        if covered is not None:
            assert covered == list(range(plan.bounds[c], plan.bounds[c + 1]))
        assert sum(e - s for s, e in spans) == plan.bounds[c + 1] - plan.bounds[c]
    tags = {plan.tag(0, step, j) for step in range(2 * (n - 1)) for j in range(plan.nseg)}
    assert len(tags) == 2 * (n - 1) * plan.nseg and max(tags) < 1 << 16


def test_a_chunk_is_cut_in_equal_segments_once_halves_are_large_enough() -> None:
    mib = 1 << 20
    assert ring_plan.RingPlan(mib // 4 // 4, 2, 0, 4).nseg == 1  # 0.25 MB: 128 KB chunks
    four = ring_plan.RingPlan(4 * mib // 4, 2, 0, 4)  # 4 MB: 2 MB chunks in two 1 MB segments
    assert (four.nseg, four.seg * 4) == (2, mib)
    big = ring_plan.RingPlan(100 * mib // 4, 2, 0, 4)  # 50 MB chunks: 13 segments of <= 4 MB
    assert big.nseg == 13 and big.seg * 4 <= ring_plan.SEGMENT_BYTES
    sizes = [big.span(0, j)[1] - big.span(0, j)[0] for j in range(big.nseg)]
    assert sum(sizes) == big.bounds[1] and max(sizes) - min(sizes) < big.nseg  # none short
    odd = ring_plan.RingPlan(25 * mib // 4 + 7, 2, 1, 4)  # chunks of unequal length
    for chunk in range(2):
        spans = [odd.span(chunk, j) for j in range(odd.nseg)]
        assert spans[0][0] == odd.bounds[chunk] and spans[-1][1] == odd.bounds[chunk + 1]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_small_tensors_take_the_gather_ring_and_its_limit_shrinks_with_the_world() -> None:
    limit = 1 << 20
    assert ring_plan.uses_gather(limit, 2, limit)
    assert not ring_plan.uses_gather(limit + 1, 2, limit)
    assert ring_plan.uses_gather(limit // 6, 4, limit)  # 4 ranks: a sixth of the two-rank limit
    assert not ring_plan.uses_gather(limit // 6 + 1, 4, limit)
    assert not ring_plan.uses_gather(limit // 28 + 1, 8, limit)
    assert not ring_plan.uses_gather(1, 2, 0)


def test_reduce_op_names() -> None:
    assert ring.op_name("SUM") == "sum"
    assert ring.op_name(dist.ReduceOp.AVG) == "avg"
    assert ring.op_name(dist.ReduceOp.MAX) == "max"
    with pytest.raises(ValueError, match="does not support the reduce op"):
        ring.op_name("median")
