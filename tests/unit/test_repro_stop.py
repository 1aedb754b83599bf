"""A rank's replay plan as ddpdoctor's stop found it (no job launched): what it did after the
stop is the stop's doing."""

from __future__ import annotations

from ddpdoctor.analysis.model import NS
from ddpdoctor.repro.facts import Ending, rank_plan
from ddpdoctor.trace import layout as L
from tests.unit.factory import T0, rank, rec


def test_a_call_begun_after_the_stop_is_not_replayed_and_the_rank_stalls_before_it():
    """Rank 1, blocked in a file lock held by rank 0, got past it when the stop killed
    rank 0, and entered its next barrier: replayed, it stalls after its first barrier."""
    run = rank(1, [rec(0, "barrier", t=1.0, site="job.py:28"),
                   rec(1, "barrier", t=20.0, dur=None, site="job.py:39")],
               state=L.RankState.IN_COLLECTIVE, cpu_busy=False)
    run.stop_ns = T0 + 15 * NS
    plan = rank_plan(run)
    assert [st.site for st in plan.steps] == ["job.py:28"]
    assert plan.ending == Ending.STALLS and plan.busy is False


def test_a_call_open_at_the_stop_is_where_the_rank_hangs():
    run = rank(0, [rec(0, "barrier", t=1.0, site="job.py:28"),
                   rec(1, "barrier", t=2.0, dur=None, site="job.py:33")],
               state=L.RankState.IN_COLLECTIVE)
    run.stop_ns = T0 + 15 * NS
    plan = rank_plan(run)
    assert [st.site for st in plan.steps] == ["job.py:28", "job.py:33"]
    assert plan.ending == Ending.HANGS
