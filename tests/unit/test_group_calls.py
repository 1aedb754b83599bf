"""new_group calls made by some ranks only: the extra call is named at its line, from each
rank's own sequence of calls (no majority needed); the same calls on every rank, or a group
with use_local_synchronization, are no finding."""

from __future__ import annotations

from ddpdoctor.analysis.causal.group_calls import new_group_divergence
from tests.unit.test_detectors_unit import job


def _calls(*calls: tuple) -> dict:
    return {"meta": [{"event": "new_group", "seq": i, "ranks": ranks, "site": f"/w/t.py:{line}",
                      "local": local} for i, (ranks, line, local) in enumerate(calls)]}


def test_a_group_created_by_one_rank_only_is_named_at_its_line() -> None:
    found = new_group_divergence(job({0: _calls(([0], 6, False), ([0, 1], 7, False)),
                                      1: _calls(([0, 1], 7, False))}))
    assert found is not None and (found.kind, found.ranks) == ("collective_mismatch", (0,))
    assert "new_group([0]) at t.py:6" in found.summary and "shifted" in found.summary


def test_a_rank_that_skipped_the_last_call_is_not_the_culprit() -> None:
    found = new_group_divergence(job({0: _calls((None, 3, False), ([0, 1], 9, False)),
                                      1: _calls((None, 3, False))}))
    assert found is not None and found.ranks == (0,), found


def test_the_same_calls_or_local_synchronisation_are_fine() -> None:
    same = _calls(([0, 1], 4, False))
    assert new_group_divergence(job({0: same, 1: dict(same)})) is None
    assert new_group_divergence(job({0: _calls(([0], 5, True)), 1: _calls()})) is None
