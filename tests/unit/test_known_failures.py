"""Known failures of torch itself, on hand-built jobs: one test per table entry, and the
near misses that stay the user's own failure."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.causal import known_failures as K
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import job, mark, rank, rec, steps

FAILED = int(L.RecordFlag.FAILED)
PORT = {"type": "DistNetworkError", "message": "The server socket has failed to listen on any "
        "local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, "
        "message: address already in use"}
RESET = {"type": "DistNetworkError", "message": "failed to recv, got 0 bytes; Connection "
         "reset by peer"}
TIMEOUT = {"type": "RuntimeError", "message": "[../gloo/transport/tcp/pair.cc:534] Timed out "
           "waiting 4000ms for recv operation to complete"}


def errors(found):
    return [f for f in found if f.severity == Severity.ERROR]


def in_init(r: int, exception: dict) -> object:
    return rank(r, [mark("init", dur=None)], L.RankState.FAILED, exception=exception,
                init=False)


def test_every_entry_has_an_upstream_and_a_workaround() -> None:
    ids = [k.id for k in K.TABLE]
    assert len(ids) == len(set(ids))
    for k in K.TABLE:
        assert k.upstream and k.workaround and k.fragment.pattern


def test_a_taken_store_port_is_a_known_failure() -> None:
    r0 = in_init(0, PORT)
    r1 = rank(1, [mark("init", dur=None)], init=False, returncode=-15)
    [f] = errors(analyze(job([r0, r1], outcome="failed"), []))
    assert f.ranks == (0,) and f.evidence["known_failure"] == "store_port_in_use"
    assert f.fix.startswith("Give each job a free port")


def test_eaddrinuse_outside_the_rendezvous_is_the_users_own() -> None:
    """The fragment alone does not match: a port the user's own server binds is their code."""
    exc = {**PORT, "type": "OSError"}
    r0 = rank(0, steps(3), L.RankState.FAILED, exception=exc)
    r1 = rank(1, steps(3), L.RankState.EXITED)
    found = analyze(job([r0, r1], outcome="failed"), [])
    assert all("known_failure" not in f.evidence for f in found)


def test_a_restarted_attempt_refused_at_init_is_a_known_failure() -> None:
    runs = [in_init(0, RESET), in_init(1, RESET)]
    j = job(runs, outcome="failed")
    j.run_dirs = [Path("/nonexistent/attempt-1")]
    found = errors(analyze(j, []))
    assert [f.evidence.get("known_failure") for f in found] == ["restart_refused_at_init"]


def test_the_same_refusal_on_the_first_attempt_is_not_the_restart_entry() -> None:
    found = analyze(job([in_init(0, RESET), in_init(1, RESET)], outcome="failed"), [])
    assert all(f.evidence.get("known_failure") != "restart_refused_at_init" for f in found)


def test_gloo_teardown_abort_is_a_known_failure() -> None:
    r0 = rank(0, steps(5), L.RankState.EXITED, step=5)
    r1 = rank(1, steps(5), step=5, returncode=-6,
              fault="Fatal Python error: Aborted\n\nterminate called without an active exception")
    [f] = analyze(job([r0, r1], outcome="failed"), [])
    assert f.severity == Severity.WARNING and f.evidence["known_failure"] == "gloo_teardown_abort"
    assert "destroy_process_group" in f.fix


def test_a_sigabrt_inside_a_collective_is_not_the_teardown_entry() -> None:
    r0 = rank(0, steps(6) + [rec(6, t=6, dur=None)], step=6)
    r1 = rank(1, steps(6), returncode=-6, fault="Fatal Python error: Aborted")
    found = analyze(job([r0, r1]), [])
    assert all(f.evidence.get("known_failure") is None for f in found)


def test_every_rank_timing_out_inside_the_same_collective_is_one_known_failure() -> None:
    runs = [rank(r, steps(3) + [rec(3, t=3, dur=4, flags=FAILED)], L.RankState.FAILED,
                 exception=TIMEOUT) for r in (0, 1, 2)]
    found = errors(analyze(job(runs, outcome="failed"), []))
    assert len(found) == 1, [(f.kind, f.ranks, f.summary) for f in found]
    assert found[0].evidence["known_failure"] == "collective_timeout_all_inside"
    assert "GLOO_SOCKET_IFNAME" in found[0].fix


def test_a_timeout_while_a_peer_is_elsewhere_stays_the_peers_fault() -> None:
    r0 = rank(0, steps(3) + [rec(3, t=3, dur=4, flags=FAILED)], L.RankState.FAILED,
              exception=TIMEOUT)
    r1 = rank(1, steps(3), cpu_busy=True)
    found = analyze(job([r0, r1], outcome="failed"), [])
    assert all(f.evidence.get("known_failure") is None for f in found)
    assert errors(found)[0].ranks == (1,)
