"""Time that does not lie: one host's clock shifted by 30 s changes no finding.

Ranks 0-1 run on host "a", ranks 2-3 on host "b"; every stamp host "b" writes (records,
heartbeat, exception times) is shifted by ``skew`` seconds, as an NTP-less node would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.align.clocks import host_now, one_host, ordered
from ddpdoctor.analysis.detectors import straggler
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import NS, Finding, JobView, RankRun
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.record import CallRecord
from tests.unit.factory import NOW, T0, frame, job, rank, rec

SKEW_S = 30.0
HOST = {0: "a", 1: "a", 2: "b", 3: "b"}
FAILED = int(L.RecordFlag.FAILED)


def _shift(records: list[CallRecord], skew: float) -> list[CallRecord]:
    ns = int(skew * NS)
    return [replace(r, t_start=r.t_start + ns, t_end=r.t_end + ns if r.t_end else 0)
            for r in records]


def on_host(r: int, records: list[CallRecord], skew: float = 0.0, **kw: Any) -> RankRun:
    """Rank ``r`` on its host; host "b"'s stamps shifted by ``skew`` seconds."""
    s = skew if HOST[r] == "b" else 0.0
    if "exception" in kw:
        kw["exception"] = {**kw["exception"], "t": kw["exception"]["t"] + int(s * NS)}
    run = rank(r, records, world=4, **kw)
    ns = int(s * NS)
    run.trace.records = _shift(run.trace.records, s)
    run.trace.header = replace(run.header, host=HOST[r], heartbeat_ns=run.header.heartbeat_ns
                               + ns, started_ns=run.header.started_ns + ns)
    rebuilt = rank_from(run)
    rebuilt.fault, rebuilt.returncode, rebuilt.stack = run.fault, run.returncode, run.stack
    return rebuilt


def rank_from(run: RankRun) -> RankRun:
    from ddpdoctor.analysis.load.run_dirs import rank_run

    return rank_run(run.trace)


def facts(found: list[Finding]) -> list[tuple]:
    """What must not change with the skew: kinds, ranks, severity, seq, links, summary."""
    return [(f.kind, f.ranks, f.severity, f.seq, f.caused_by, f.summary) for f in found]


def lockstep(r: int, n: int, late_s: float = 0.0) -> list[CallRecord]:
    """``n`` all_reduces one a second; a rank ``late_s`` late makes the others wait."""
    wait = 0.001 + late_s
    return [rec(i, t=i + (late_s if r == 3 else 0.0),
                dur=0.001 if r == 3 else wait) for i in range(n)]


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S])
def test_skewed_host_is_no_straggler(skew: float) -> None:
    runs = [on_host(r, lockstep(r, 12), skew) for r in range(4)]
    assert straggler.detect(job(runs, outcome="completed")) == []
    assert [f for f in analyze(job(runs, outcome="completed"), [])
            if f.kind == "straggler"] == []


@pytest.mark.parametrize("skew", [0.0, SKEW_S, -SKEW_S])
def test_real_straggler_on_the_skewed_host_is_still_named(skew: float) -> None:
    runs = [on_host(r, lockstep(r, 12, late_s=0.4), skew) for r in range(4)]
    (f,) = straggler.detect(job(runs, outcome="completed"))
    assert f.ranks == (3,)
    assert abs(f.evidence["median_lag_s"] - 0.4) < 0.01


def test_one_host_keeps_comparing_start_times() -> None:
    runs = [rank(r, [rec(i, t=i + (0.3 if r == 1 else 0.0), dur=0.001) for i in range(12)])
            for r in range(2)]
    (f,) = straggler.detect(job(runs, outcome="completed"))
    assert f.ranks == (1,) and abs(f.evidence["median_lag_s"] - 0.3) < 1e-6


def _hang(skew: float) -> JobView:
    """Rank 3 (host b) computes in log_metrics; the others wait in seq 5."""
    runs = [on_host(r, lockstep(r, 5) + ([] if r == 3 else [rec(5, t=5, dur=None)]), skew,
                    stack=[frame("train.py", 77, "log_metrics")] if r == 3 else None)
            for r in range(4)]
    return job(runs)


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S])
def test_hang_root_cause_is_the_same_under_skew(skew: float) -> None:
    plain, skewed = analyze(_hang(0.0), []), analyze(_hang(skew), [])
    assert plain and plain[0].ranks == (3,)
    assert facts(skewed) == facts(plain)
    assert [(w.rank, w.waits_for) for w in diagnose(_hang(skew)).waits] == \
        [(w.rank, w.waits_for) for w in diagnose(_hang(0.0)).waits]


def _two_deaths(skew: float) -> JobView:
    """Rank 1 (host a) raises after seq 2; rank 2 (host b) raises later, after seq 4;
    the others fail of their absence."""
    boom1 = {"type": "ValueError", "message": "bad batch on rank 1", "t": T0 + 3 * NS}
    boom2 = {"type": "KeyError", "message": "'label' on rank 2", "t": T0 + 5 * NS}
    closed = {"type": "RuntimeError", "message": "[gloo] Connection closed by peer",
              "t": T0 + 6 * NS}
    runs = [on_host(0, lockstep(0, 5) + [rec(5, t=5, dur=1, flags=FAILED)], skew,
                    state=L.RankState.FAILED, exception=closed),
            on_host(1, lockstep(1, 3), skew, state=L.RankState.FAILED, exception=boom1),
            on_host(2, lockstep(2, 5), skew, state=L.RankState.FAILED, exception=boom2),
            on_host(3, lockstep(3, 5) + [rec(5, t=5, dur=1, flags=FAILED)], skew,
                    state=L.RankState.FAILED, exception=closed)]
    return job(runs, outcome="failed")


def test_two_crashes_on_two_hosts_keep_their_order_under_skew() -> None:
    plain = analyze(_two_deaths(0.0), [])
    assert plain[0].kind == "rank_failed" and plain[0].ranks == (1,)
    # host b's clock 30 s behind would put rank 2's crash first by wall clock
    assert facts(analyze(_two_deaths(-SKEW_S), [])) == facts(plain)
    assert facts(analyze(_two_deaths(SKEW_S), [])) == facts(plain)


def test_ordering_and_now_by_host() -> None:
    skewed = _hang(SKEW_S)
    assert not one_host(skewed, [1, 2]) and one_host(skewed, [2, 3])
    # host b's "now" is its own newest stamp, 30 s ahead of host a's
    assert host_now(skewed, 2) - host_now(skewed, 0) == pytest.approx(SKEW_S * NS, rel=0.01)
    single = job([rank(r, []) for r in range(2)])
    assert host_now(single, 1) == NOW
    items = [(2, T0, 7), (0, T0 + 100 * NS, 3)]
    # across hosts: by seq, not by the stamps; on one host: by the stamps
    assert ordered(skewed, items, lambda i: i[0], lambda i: i[1], lambda i: i[2])[0][0] == 0
    assert ordered(skewed, [(2, T0 + NS, 1), (3, T0, 9)], lambda i: i[0], lambda i: i[1],
                   lambda i: i[2])[0][0] == 3
