"""The ring's plan: chunks cover a tensor like tensor_split, segments tile each chunk."""

from __future__ import annotations

import pytest
import torch

from ddpdoctor.ddp.ring import RingPlan, chunk_bounds


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
