"""duplicate_data from the samplers' seeds: DistributedSamplers seeded per rank draw
overlapping shards (a warning at the sampler's line); one seed on every rank, or no
shuffle, is the healthy shape (no finding)."""

from __future__ import annotations

from ddpdoctor.analysis.detectors import sampler_overlap
from tests.unit.test_detectors_unit import epoch_end, epoch_start, job


def _rank(seed: int, shuffle: bool = True, replicas: int = 2) -> dict:
    meta = [epoch_start(0, 4, shuffle=shuffle, sampler_seed=seed, sampler_epoch=0,
                        num_replicas=replicas, sampler_site="/w/train.py:31"),
            epoch_end(0, 4, "o", steps=4)]
    return {"meta": meta, "step": 4}


def test_samplers_seeded_per_rank_overlap() -> None:
    found = sampler_overlap.detect(job({0: _rank(1234), 1: _rank(1235)}))
    assert [(f.kind, f.severity.value, f.ranks) for f in found] == \
        [("duplicate_data", "warning", (0, 1))]  # two ranks: neither can be singled out
    assert "train.py:31" in found[0].summary and "25%" in found[0].summary
    assert found[0].evidence["seeds"] == {"0": 1234, "1": 1235}


def test_the_rank_with_the_odd_seed_is_named_where_a_majority_tells() -> None:
    ranks = {r: _rank(7, replicas=4) for r in range(4)}
    ranks[2] = _rank(9, replicas=4)
    [found] = sampler_overlap.detect(job(ranks))
    assert found.ranks == (2,) and "32%" in found.summary  # (3/4)^4 never drawn


def test_one_seed_on_every_rank_or_no_shuffle_is_healthy() -> None:
    assert sampler_overlap.detect(job({0: _rank(5), 1: _rank(5)})) == []
    assert sampler_overlap.detect(job({0: _rank(1, shuffle=False),
                                       1: _rank(2, shuffle=False)})) == []
