"""Consequences typed: a rank's error raised because its peer aborted or died (transport
errors, gloo's enforce on a mismatched peer) is info with caused_by, never a second error."""

from __future__ import annotations

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import job, rank, rec, steps

FAILED = int(L.RecordFlag.FAILED)
RESET = {"type": "RuntimeError", "message": "[/pytorch/third_party/gloo/gloo/transport/tcp/"
         "pair.cc:537] Read error [127.0.0.1]:2954: Connection reset by peer. This is "
         "typically caused by a remote worker hanging"}
ENFORCE = {"type": "RuntimeError", "message": "[enforce fail at /pytorch/third_party/gloo/gloo/"
           "transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 16 vs 8"}


def errors(found):
    return [f for f in found if f.severity == Severity.ERROR]


def test_a_peers_abort_on_a_mismatch_gives_the_victims_no_error() -> None:
    """Rank 2 called the odd collective; gloo's enforce aborts rank 0 on the size it got,
    and rank 1 reads a reset connection: one error (the mismatch), the rest consequences."""
    def last(r: int) -> list:
        return steps(3) + [rec(3, t=3, dur=0.5, flags=FAILED, shape=(8,) if r == 2 else (4,))]
    runs = [rank(0, last(0), L.RankState.FAILED, exception=ENFORCE, world=3),
            rank(1, last(1), L.RankState.FAILED, exception=RESET, world=3),
            rank(2, last(2), world=3, returncode=-15)]
    found = analyze(job(runs, outcome="failed"), [])
    errs = errors(found)
    assert [(f.kind, f.ranks) for f in errs] == [("collective_mismatch", (2,))], \
        [(f.kind, f.ranks, f.severity, f.summary) for f in found]
    told = {r for f in found if f.caused_by == 0 for r in f.ranks}
    assert {0, 1} <= told


def test_a_reset_connection_outside_any_recorded_call_is_a_consequence() -> None:
    """The reducer's or the store's own traffic: no recorded call failed, the text alone
    says the peer went away."""
    crash = {"type": "ValueError", "message": "corrupt record 17"}
    r0 = rank(0, steps(3), L.RankState.FAILED, exception=RESET)
    r1 = rank(1, steps(3), L.RankState.FAILED, exception=crash)
    d = diagnose(job([r0, r1], outcome="failed"))
    assert d.states[0].kind == StateKind.PEER_FAILED
    errs = errors(d.findings)
    assert [(f.kind, f.ranks) for f in errs] == [("rank_failed", (1,))]
    assert "0" in errs[0].evidence["consequences"]


def test_a_timeout_outside_any_call_is_not_taken_for_a_peers_death() -> None:
    """Only a transport error that a peer's end raises counts without a call: a timeout
    in the rank's own code is its own failure."""
    own = {"type": "TimeoutError", "message": "timed out reading /data/shard-3"}
    r0 = rank(0, steps(3), L.RankState.FAILED, exception=own)
    r1 = rank(1, steps(3), L.RankState.EXITED)
    d = diagnose(job([r0, r1], outcome="failed"))
    assert d.states[0].kind == StateKind.DIED


def test_a_comm_hooks_failure_is_told_without_torchs_callback_wrapping() -> None:
    """A bucket whose ring all-reduce failed reaches backward through a future's callback,
    which torch wraps ("Got the following error when running the callback: ..."): the
    death is told as the failure itself, and it is still a peer's consequence."""
    wrapped = {"type": "RuntimeError", "message": "Got the following error when running the "
               "callback: RuntimeError: ddpdoctor: gradient all-reduce of bucket 0 failed: "
               "ring: connection closed by peer rank 1 (it exited or failed) (Connection "
               "reset by peer)\n\nAt:\n  comm_hook.py(153): _sum_or_raise"}
    crash = {"type": "ValueError", "message": "corrupt record 17"}
    r0 = rank(0, steps(3), L.RankState.FAILED, exception=wrapped)
    r1 = rank(1, steps(3), L.RankState.FAILED, exception=crash)
    d = diagnose(job([r0, r1], outcome="failed"))
    cause = d.states[0].death.cause
    assert cause.startswith("RuntimeError: ddpdoctor: gradient all-reduce of bucket 0"), cause
    assert "callback" not in cause
    assert d.states[0].kind == StateKind.PEER_FAILED
    assert [(f.kind, f.ranks) for f in errors(d.findings)] == [("rank_failed", (1,))]


def test_a_rank_the_launcher_ended_after_its_peers_failed_is_not_blamed() -> None:
    """Ranks 2 and 3 raise a KeyError at one line; torchrun then SIGTERMs rank 1, which was
    computing (no call open), and rank 0, which waited for the three of them: one error, the
    two alike failures, and rank 1 is not named as the absent rank."""
    def key_error(r: int) -> dict:
        return {"type": "KeyError", "message": str(r),
                "traceback": [{"file": "/w/eval.py", "line": 45, "name": "main"}]}
    runs = [rank(0, steps(3) + [rec(3, t=3, dur=None)], world=4, returncode=-15),
            rank(1, steps(3), world=4, returncode=-15),
            rank(2, steps(3), L.RankState.FAILED, exception=key_error(2), world=4),
            rank(3, steps(3), L.RankState.FAILED, exception=key_error(3), world=4)]
    found = analyze(job(runs, outcome="failed"), [])
    errs = errors(found)
    assert errs and set(errs[0].ranks) <= {2, 3}, [(f.kind, f.ranks, f.summary) for f in found]
    assert not [f for f in errs if {0, 1} & set(f.ranks)], [(f.kind, f.ranks) for f in errs]
