"""Wait chains and cycles of 10,000 ranks: the causal model names the root in under a second."""

from __future__ import annotations

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.graph import Wait, cycles, reachable
from ddpdoctor.analysis.model import JobView, Severity
from ddpdoctor.trace import layout as L
from tests.cpu_time import own_cpu_seconds
from tests.unit.factory import job, rank, recv, steps

RANKS = 10_000
BOUND_S = 1.0  # the bound; diagnose takes ~0.35 s of CPU here on a 2-core VM


def _ring_of_recvs(n: int, chain: bool) -> JobView:
    """Rank i waits in a recv from rank i+1; ``chain``: the last rank computes (the sink),
    else it waits on rank 0 (one cycle of every rank)."""
    members = list(range(n))
    runs = []
    for r in range(n):
        if chain and r == n - 1:
            runs.append(rank(r, steps(0), world=n, groups={0: members}))
        else:
            runs.append(rank(r, [recv(0, (r + 1) % n, t=1)], L.RankState.IN_COLLECTIVE,
                             world=n, groups={0: members}))
    return job(runs)


def _timed_diagnosis(view: JobView):
    with own_cpu_seconds() as took:  # CPU time: the other jobs on a loaded machine do not count
        d = diagnose(view)
    return d, took[0]


def test_a_10000_rank_wait_chain_blames_its_sink_in_under_a_second() -> None:
    d, took = _timed_diagnosis(_ring_of_recvs(RANKS, chain=True))
    errors = [f for f in d.findings if f.severity == Severity.ERROR]
    assert [f.ranks for f in errors] == [(RANKS - 1,)]
    assert errors[0].kind == "missing_collective"
    assert len(d.waits) == RANKS - 1
    assert took < BOUND_S, f"diagnose took {took:.2f} s of CPU"


def test_a_10000_rank_cycle_is_one_deadlock_in_under_a_second() -> None:
    d, took = _timed_diagnosis(_ring_of_recvs(RANKS, chain=False))
    errors = [f for f in d.findings if f.severity == Severity.ERROR]
    assert [f.kind for f in errors] == ["deadlock"]
    assert tuple(errors[0].ranks) == tuple(range(RANKS))
    assert took < BOUND_S, f"diagnose took {took:.2f} s of CPU"


def _waits(edges: dict[int, tuple[int, ...]]) -> list[Wait]:
    return [Wait(r, t, "0", 0, "recv") for r, t in edges.items()]


def test_cycles_are_found_without_recursion_in_tarjans_order() -> None:
    n = 50_000  # far past the interpreter's recursion limit
    chain = {r: (r + 1,) for r in range(n)} | {n: (n - 10,)}
    assert cycles(_waits(chain)) == [tuple(range(n - 10, n + 1))]
    two = {5: (6,), 6: (5, 1), 1: (2,), 2: (1,), 3: (3,)}
    assert cycles(_waits(two)) == [(1, 2), (5, 6)]
    assert reachable(0, _waits(chain)) == set(range(1, n + 1))
