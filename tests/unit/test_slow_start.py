"""Slow is not hung, at the start too: the hang rule on ranks that are late to the rendezvous.

A rank waits in init_process_group (or a collective) while its peers are still on their way:
importing torch (their process exists and uses CPU), or not seen at all yet (no trace: their
node has not reported them).  Neither is a hang; a peer that never comes still is."""

from __future__ import annotations

from ddpdoctor.analysis.causal.verdict import (HangVerdict, Straggling, judge,
                                               report_grace_s)
from ddpdoctor.analysis.model import NS, JobView, NodeFacts, RankRun
from ddpdoctor.trace import layout as L
from tests.unit.factory import NOW, T0, job, mark, rank, rec, steps

TIMEOUT = 5.0
AGO = (NOW - T0) / NS  # rec(t=AGO - s): a record s seconds before the job's now
STARTING = L.RankState.STARTING


def in_init(r: int, waited_s: float, world: int = 2, **kw) -> RankRun:
    """Rank ``r`` inside init_process_group for ``waited_s``."""
    return rank(r, [mark("init", t=AGO - waited_s, dur=None)], STARTING, init=False,
                world=world, **kw)


def starting(r: int, cpu_busy: bool, world: int = 2, **kw) -> RankRun:
    """Rank ``r``'s process runs but has not called init yet (its trace says STARTING)."""
    run = rank(r, [], STARTING, init=False, world=world, cpu_busy=cpu_busy, **kw)
    run.progress_ns = NOW - int(0.2 * NS) if cpu_busy else NOW - 60 * NS
    return run


def live(runs: list[RankRun], world: int | None = None) -> JobView:
    return job(runs, world=world, outcome=None, live=True, hang_timeout=TIMEOUT)


def test_a_peer_that_reached_the_rendezvous_a_moment_ago_ends_the_wait() -> None:
    """Rank 0 waited 10 s for rank 1, which was importing torch and entered init 0.2 s ago:
    the rendezvous completes now, nothing is hung."""
    assert judge(live([in_init(0, 10), in_init(1, 0.2)]), TIMEOUT) is None


def test_a_rendezvous_every_rank_entered_a_timeout_ago_still_hangs() -> None:
    verdict = judge(live([in_init(0, 20), in_init(1, TIMEOUT + 1)]), TIMEOUT)
    assert isinstance(verdict, HangVerdict) and "every rank is inside it" in verdict.message


def test_a_peer_importing_torch_is_starting_not_absent() -> None:
    said = judge(live([in_init(0, 10), starting(1, cpu_busy=True)]), TIMEOUT)
    assert isinstance(said, Straggling) and said.ranks == (1,)
    assert "rank 1 is starting" in said.message and "rank 0 waits" in said.message


def test_a_peer_idle_before_init_is_absent() -> None:
    verdict = judge(live([in_init(0, 10), starting(1, cpu_busy=False)]), TIMEOUT)
    assert isinstance(verdict, HangVerdict) and verdict.absent == (1,)


def test_a_rank_never_seen_is_starting_within_the_grace() -> None:
    """Ranks 2 and 3 have no trace (their node has not reported them): starting, until the
    wait passes the timeout plus the grace; then they are absent, as before."""
    grace = report_grace_s(TIMEOUT)
    near = live([in_init(0, TIMEOUT + grace - 1, world=4), in_init(1, 2, world=4)], world=4)
    said = judge(near, TIMEOUT)
    assert isinstance(said, Straggling) and said.ranks == (2, 3)
    assert "ranks 2 and 3 not seen yet (starting)" in said.message
    late = live([in_init(0, TIMEOUT + grace + 1, world=4), in_init(1, 2, world=4)], world=4)
    verdict = judge(late, TIMEOUT)
    assert isinstance(verdict, HangVerdict) and verdict.absent == (2, 3)
    assert "rank 0 waits for ranks 2 and 3 in init_process_group" in verdict.message


def test_an_idle_peer_is_absent_even_beside_a_rank_never_seen() -> None:
    runs = [in_init(0, TIMEOUT + 1, world=3), starting(1, cpu_busy=False, world=3)]
    verdict = judge(live(runs, world=3), TIMEOUT)
    assert isinstance(verdict, HangVerdict) and 1 in verdict.absent


def test_the_grace_is_the_time_a_silent_node_is_given() -> None:
    assert report_grace_s(6.0) == 5.0 and report_grace_s(60.0) == 30.0


def test_a_collective_the_last_peer_just_entered_is_not_hung() -> None:
    """Rank 0 waited 10 s in all_reduce #3 while rank 1 computed; rank 1 entered it 0.1 s
    ago (still inside, or already returned): the call completes, nothing is hung."""
    waiting = rank(0, steps(3) + [rec(3, t=AGO - 10, dur=None)])
    for dur in (None, 0.01):
        arrived = rank(1, steps(3) + [rec(3, t=AGO - 0.1, dur=dur)])
        assert judge(live([waiting, arrived]), TIMEOUT) is None
    stalled = rank(1, steps(3) + [rec(3, t=AGO - TIMEOUT - 1, dur=None)])
    assert isinstance(judge(live([waiting, stalled]), TIMEOUT), HangVerdict)


def test_the_last_arrival_is_measured_on_its_own_hosts_clock() -> None:
    """Rank 1 runs on host b, whose clock is 7 s ahead; it entered init 0.2 s ago by its own
    clock.  Read on node 0's clock, its stamp would look 7 s old: it is not."""
    j = live([in_init(0, 10), in_init(1, 0.2, host="b", shift=7.0)])
    j.nodes = {"b": NodeFacts("1", "b", skew_ns=7 * NS)}
    assert judge(j, TIMEOUT) is None
