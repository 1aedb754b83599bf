"""Whose failure a rank's error is, from evidence: where the error was raised (torch's
collective, or the rank's own code), and whose clock a stop was taken on."""

from __future__ import annotations

from ddpdoctor.analysis.causal.facts import rank_states
from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import NS, NodeFacts, Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import NOW, job, rank, rec, steps

USER_TIMEOUT = {"type": "TimeoutError", "message": "feature store: read timeout (peer 10.0.0.7)",
                "traceback": [{"filename": "train.py", "line": 30, "name": "main"},
                              {"filename": "/job/feature_store.py", "line": 88,
                               "name": "fetch"}]}


def test_a_ranks_own_timeout_error_is_its_own_failure_not_a_peers() -> None:
    r0 = rank(0, steps(3) + [rec(3, t=3, dur=None)])
    r1 = rank(1, steps(3) + [rec(3, t=3, dur=0.5, flags=int(L.RecordFlag.FAILED))],
              L.RankState.FAILED, exception=USER_TIMEOUT)
    j = job([r0, r1], outcome="failed")
    assert rank_states(j)[1].kind == StateKind.DIED
    first = [f for f in analyze(j, []) if f.severity == Severity.ERROR][0]
    assert first.kind == "rank_failed" and first.ranks == (1,)
    assert "feature store: read timeout" in first.summary


def test_another_nodes_stop_does_not_hide_a_ranks_death() -> None:
    """Rank 1 runs on host h2, whose clock is 30 s ahead of node 0's: its exception, 25 s
    after node 0's stop on h2's clock, came 5 s before that stop."""
    r0 = rank(0, steps(3) + [rec(3, t=3, dur=None)], host="h1")
    r1 = rank(1, steps(3), L.RankState.FAILED, host="h2",
              exception={"type": "ValueError", "message": "bad record", "t": NOW - 5 * NS})
    j = job([r0, r1], outcome="hung")
    j.nodes = {"h2": NodeFacts("1", "h2", skew_ns=30 * NS)}
    j.supervisor_events = [{"event": "stop", "t": NOW - 30 * NS}]
    assert rank_states(j)[1].kind == StateKind.DIED
    j.nodes = {"h2": NodeFacts("1", "h2", skew_ns=None)}  # no skew: no comparison
    assert rank_states(j)[1].kind == StateKind.DIED
