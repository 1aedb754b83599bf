"""Ranks in words at any scale: ranges (``ranks 0-40, 42-63``), ranks grouped by what they
do in a finding's detail, in the console's table (the root cause's row first) and in its
wait lines; a summary of a few lines whatever the world size."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import rank_groups, ranks_text
from ddpdoctor.report.console import print_summary
from tests.unit.factory import job, rank, rec, steps


@pytest.mark.parametrize("ranks, text", [
    ([3], "rank 3"),
    ([1, 0], "ranks 0 and 1"),
    ([0, 2, 5], "ranks 0, 2 and 5"),
    ([2, 0, 1], "ranks 0-2"),
    ([0, 1, 2, 5], "ranks 0-2, 5"),
    ([*range(6145), *range(6146, 8192)], "ranks 0-6144, 6146-8191"),
    (range(0, 8192, 2), "ranks 0, 2, 4, 6, 8, 10, 12, 14, …, 8190 (4096 ranks)"),
    ([4, 4, 5], "ranks 4 and 5"),
])
def test_ranks_are_written_in_ranges(ranks, text):
    assert ranks_text(ranks) == text


def test_a_count_follows_a_range_and_only_a_range():
    assert ranks_text([*range(6145), *range(6146, 8192)], count=True) == \
        "ranks 0-6144, 6146-8191 (8191 ranks)"
    assert ranks_text([0, 2, 5], count=True) == "ranks 0, 2 and 5"
    assert ranks_text([7], count=True) == "rank 7"


def test_ranks_that_do_the_same_are_one_group_in_order_of_their_lowest_rank():
    assert rank_groups({3: "b", 0: "a", 1: "b", 2: "a"}) == [((0, 2), "a"), ((1, 3), "b")]


WORLD = 64
CULPRIT = 41


def _mismatch_at(world: int, culprit: int):
    """Every rank in its 4th all_reduce, ``culprit`` with another shape from another line."""
    runs = [rank(r, steps(3) + [rec(3, t=3, dur=None,
                                    shape=(11,) if r == culprit else (128,),
                                    site="train.py:120" if r == culprit else "train.py:88")],
                 world=world) for r in range(world)]
    return analyze(job(runs), [])


def test_a_mismatch_at_64_ranks_names_the_others_in_ranges_and_groups_them():
    [first, *_] = _mismatch_at(WORLD, CULPRIT)
    assert first.kind == "collective_mismatch" and first.ranks == (CULPRIT,)
    others = f"ranks 0-{CULPRIT - 1}, {CULPRIT + 1}-{WORLD - 1}"
    assert f"where {others} called" in first.summary, first.summary
    assert ", 2, 3," not in first.summary and ", 2, 3," not in first.detail
    lines = first.detail.splitlines()
    assert f"  {others} ({WORLD - 1} ranks): all_reduce(float32[128], sum) at train.py:88" \
        in lines, first.detail
    assert f"  rank {CULPRIT}: all_reduce(float32[11], sum) at train.py:120" in lines
    assert f"{others.capitalize()} agree; the odd one out: rank {CULPRIT}." in lines


def test_the_words_stay_the_same_size_from_64_ranks_to_256():
    small = _mismatch_at(WORLD, CULPRIT)[0]
    big = _mismatch_at(256, 200)[0]
    assert len(big.summary) - len(small.summary) < 10, big.summary
    assert len(big.detail) - len(small.detail) < 40, big.detail


def _report(world: int, culprit: int) -> dict:
    """A hung job's report: ``culprit`` computes, the others wait for it in all_reduce #12
    at train.py:32, ranks 0-3 one step behind in the same call."""
    ranks = []
    for r in range(world):
        current = None if r == culprit else {
            "seq": 12, "op": "all_reduce", "shapes": [[2177]], "dtypes": ["float32"],
            "callsite": "train.py:32"}
        ranks.append({"rank": r, "pid": 1000 + r, "state": "computing" if r == culprit
                      else "hung", "step": 9 if r < 4 else 10, "last_seq": 11 if r ==
                      culprit else 12, "current": current})
    return {"outcome": "hung", "world_size": world, "ranks": ranks,
            "waits": [{"rank": r, "waits_for": [culprit], "group": "0", "seq": 12,
                       "op": "all_reduce"} for r in range(world) if r != culprit],
            "findings": [{"kind": "missing_collective", "severity": "error",
                          "ranks": [culprit], "summary": "s", "detail": "", "fix": ""}]}


def _printed(report: dict, width: int = 80) -> str:
    out = io.StringIO()
    print_summary(report, Path("/runs/x/report.json"),
                  Console(file=out, width=width, force_terminal=False, color_system=None))
    return out.getvalue()


def test_the_table_of_many_ranks_shows_groups_with_the_culprits_row_first():
    text = _printed(_report(8192, 6145), width=200)
    rows = text.splitlines()[2:5]
    assert rows == [
        "rank 6145 computing (step 10, seq 11)",
        "ranks 0-6144, 6146-8191 (8191 ranks) hung in all_reduce(float32[2177]) #12 at "
        "train.py:32 (steps 9-10, seq 12)",
        "ranks 0-6144, 6146-8191 (8191 ranks) wait for rank 6145 in all_reduce #12"], text
    assert len(_printed(_report(8192, 6145)).splitlines()) < 12


def test_the_culprits_row_comes_first_even_when_it_does_what_others_do():
    report = _report(64, 60)
    report["ranks"][60].update(state="hung", current=report["ranks"][0]["current"],
                               step=10, last_seq=12)
    rows = _printed(report, width=200).splitlines()[2:4]
    assert rows[0].startswith("rank 60 hung in all_reduce"), rows
    assert rows[1].startswith("ranks 0-59, 61-63 (63 ranks) hung in all_reduce"), rows


def test_sixteen_ranks_keep_a_row_each():
    text = _printed(_report(16, 5))
    assert "rank  state" in text and "1005" in text  # the pid column of a row a rank
    assert "rank 5 waits" not in text and "rank 0 waits for rank 5 in all_reduce #12" \
        not in text
    assert "ranks 0-4, 6-15 (15 ranks) wait for rank 5 in all_reduce #12" in text
