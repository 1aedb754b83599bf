"""The supervisor's one stop rule, the causal model's judge(), on hand-built live jobs:
mismatch, abandoned, hang and a death the job did not end of; and the healthy shapes that
must get no verdict."""

from __future__ import annotations

from ddpdoctor.analysis.causal.verdict import HangVerdict, judge
from ddpdoctor.analysis.model import NS
from ddpdoctor.trace import layout as L
from tests.unit.factory import NOW, T0, job, rank, rec, steps

AGO = (NOW - T0) / NS  # a record at t=AGO - x started x seconds before now


def live(runs, **kw):
    return job(runs, outcome=None, live=True, **kw)


def test_a_rank_inside_a_mismatched_collective_past_the_settle_time_stops_the_job() -> None:
    runs = [rank(r, steps(2) + [rec(2, t=AGO - 0.5, dur=None, shape=(8,) if r == 2 else (4,))],
                 world=3) for r in range(3)]
    for r in runs:
        r.alive = True
    found = judge(live(runs), 60.0)
    assert isinstance(found, HangVerdict) and found.reason == "mismatch"
    assert found.absent == (2,) and "seq 2" in found.message


def test_a_fresh_mismatch_waits_for_the_settle_time() -> None:
    runs = [rank(r, steps(2) + [rec(2, t=AGO - 0.05, dur=None, shape=(8,) if r == 2 else (4,))],
                 world=3) for r in range(3)]
    assert judge(live(runs), 60.0) is None


def test_a_wait_on_a_rank_that_exited_before_the_call_is_abandoned_at_once() -> None:
    r0 = rank(0, steps(4) + [rec(4, "barrier", t=AGO - 0.5, dur=None)], step=4)
    r1 = rank(1, steps(4), L.RankState.EXITED, step=4)
    found = judge(live([r0, r1]), 60.0)
    assert isinstance(found, HangVerdict) and found.reason == "abandoned"
    assert found.absent == (1,) and "exited rank 1 never entered" in found.message


def test_a_death_the_job_did_not_end_of_stops_it_after_the_timeout() -> None:
    r0 = rank(0, steps(4), cpu_busy=True, step=4)
    r1 = rank(1, steps(4), L.RankState.FAILED, step=4,
              exception={"type": "ValueError", "message": "bad record"})
    r0.progress_ns = NOW
    r1.alive, r1.gone_at_ns = False, NOW - 10 * NS
    found = judge(live([r0, r1]), 5.0)
    assert isinstance(found, HangVerdict) and found.reason == "failed"
    r1.gone_at_ns = NOW - 1 * NS
    assert judge(live([r0, r1]), 5.0) is None  # the launcher may still end the job


def test_a_healthy_job_between_steps_gets_no_verdict() -> None:
    runs = [rank(r, steps(4) + [rec(4, t=AGO - 0.5, dur=None)], cpu_busy=True)
            for r in (0, 1)]
    assert judge(live(runs), 5.0) is None


def _polling(waited_s: float, bound: float | None) -> list:
    """Rank 0 waits in all_reduce #4 for ``waited_s``; rank 1 works outside any collective
    (it polls: its CPU moves, its trace does not) the whole time."""
    r0 = rank(0, steps(4) + [rec(4, t=AGO - waited_s, dur=None)], step=4)
    r1 = rank(1, steps(4), cpu_busy=True, step=4)
    r0.alive = r1.alive = True
    r1.progress_ns = NOW
    return [r0, r1]


def test_every_wait_has_a_bound_a_rank_working_past_it_is_hung() -> None:
    """A rank that keeps working (polling, retrying) while the others wait on it is a
    straggler until the wait bound, then the job hangs, naming it."""
    found = judge(live(_polling(30.0, None), hang_timeout=5.0), 5.0)
    assert found is not None and not isinstance(found, HangVerdict)  # 30 s < 10 x 5 s
    j = live(_polling(30.0, None), hang_timeout=5.0)
    j.wait_bound = 20.0
    found = judge(j, 5.0)
    assert isinstance(found, HangVerdict) and found.absent == (1,)
    assert "past the wait bound (20 s)" in found.message
    found = judge(live(_polling(51.0, None), hang_timeout=5.0), 5.0)  # the default: 50 s
    assert isinstance(found, HangVerdict) and found.absent == (1,)
