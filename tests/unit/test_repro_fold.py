"""Folding a rank's repeating steps into loops (ddpdoctor.repro.fold) on synthetic sequences."""

from __future__ import annotations

import random

from ddpdoctor.repro.fold import Loop, fold, lines_of, unfold


def test_ten_thousand_identical_steps_then_a_hang_fold_to_one_loop_and_the_tail():
    steps = ["all_reduce"] * 10_000 + ["barrier"]
    folded = fold(steps)
    assert folded == [Loop(10_000, ("all_reduce",)), "barrier"]
    assert unfold(folded) == steps


def test_a_step_of_several_calls_is_the_loop_body():
    step = ["bucket0", "bucket1", "loss"]
    steps = ["init_gather"] + step * 500 + ["bucket0", "bucket1"]
    folded = fold(steps)
    assert folded == ["init_gather", Loop(500, tuple(step)), "bucket0", "bucket1"]
    assert lines_of(folded) == 7


def test_epochs_of_batches_fold_to_nested_loops():
    epoch = ["start"] + ["batch", "all_reduce"] * 6 + ["end", "metric"]
    folded = fold(epoch * 4)
    assert folded == [Loop(4, ("start", Loop(6, ("batch", "all_reduce")), "end", "metric"))]
    assert unfold(folded) == epoch * 4


def test_a_loop_is_kept_only_where_it_saves_lines():
    assert fold(["a", "a"]) == ["a", "a"]  # a loop of one call twice: 2 lines either way
    assert fold(["a", "b", "a", "b"]) == [Loop(2, ("a", "b"))]  # 3 lines for 4
    assert fold(["a", "a", "a"]) == [Loop(3, ("a",))]


def test_a_differing_step_ends_the_loop_and_the_rest_is_folded_again():
    steps = ["x"] * 5 + ["y"] + ["x"] * 5
    assert fold(steps) == [Loop(5, ("x",)), "y", Loop(5, ("x",))]


def test_unfold_inverts_fold_on_random_sequences():
    rng = random.Random(7)
    for _ in range(200):
        body = [rng.choice("abc") for _ in range(rng.randint(1, 4))]
        seq = [rng.choice("abcd") for _ in range(rng.randint(0, 5))] + \
            body * rng.randint(1, 30) + [rng.choice("abcd") for _ in range(rng.randint(0, 5))]
        folded = fold(seq)
        assert unfold(folded) == seq
        assert lines_of(folded) <= len(seq)


def test_steps_are_compared_by_their_key():
    class Call:
        def __init__(self, op: str, t: int):
            self.op, self.t = op, t

        def key(self) -> str:
            return self.op  # the time a call was made is not what makes it the same

    steps = [Call("all_reduce", t) for t in range(10)]
    folded = fold(steps)
    assert len(folded) == 1 and isinstance(folded[0], Loop) and folded[0].count == 10


def test_an_outer_loop_whose_length_is_a_multiple_of_the_inner_one_is_still_found():
    epoch = ["batch", "all_reduce"] * 6 + ["eval", "metric"]  # 14 steps: a multiple of 2
    folded = fold(epoch * 50 + ["hang"])
    assert folded == [Loop(50, (Loop(6, ("batch", "all_reduce")), "eval", "metric")), "hang"]
