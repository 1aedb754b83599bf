"""The job's world size from its ranks' headers: a damaged claim counts for nothing."""

from __future__ import annotations

from ddpdoctor.trace.world import MAX_WORLD_SIZE, plausible_world, world_size


def test_the_ranks_agree():
    assert world_size([(0, 4), (1, 4), (2, 4), (3, 4)]) == 4


def test_a_damaged_claim_is_outvoted_and_a_huge_one_ignored():
    assert world_size([(0, 2**31 - 1), (1, 2)]) == 2  # past the cap: not a claim at all
    assert world_size([(0, 3), (1, 3), (2, 40)]) == 3  # the majority
    assert world_size([(0, 2), (1, 6)]) == 2  # a tie: the smaller


def test_never_fewer_than_the_ranks_of_plausible_claims():
    assert world_size([(0, 2), (1, 2), (5, 8)]) == 6  # rank 5 of 8 exists: outvoted, but there
    assert world_size([(0, 4), (977_917, 4)]) == 4  # a rank past its own world is damage
    assert world_size([(3, 3)]) == 0


def test_no_claim_is_zero():
    assert world_size([]) == 0
    assert world_size([(-1, -7)]) == 0


def test_plausible_claims():
    assert plausible_world(0, 1) and plausible_world(7, MAX_WORLD_SIZE)
    assert not plausible_world(0, MAX_WORLD_SIZE + 1)
    assert not plausible_world(2, 2) and not plausible_world(-1, 4)


def test_a_world_past_the_traces_present_is_not_believed():
    from ddpdoctor.trace.world import RANKS_PER_TRACE

    assert world_size([(0, 3), (1, 3), (999_999, 1_000_000)]) == 3
    assert world_size([(0, 1_000_000)]) == 0
    assert world_size([(r, 8192) for r in range(8)]) == 8192  # node 0 of 1,024 nodes
    assert world_size([(0, RANKS_PER_TRACE)]) == RANKS_PER_TRACE
