"""A drift that a root cause explains is that finding's consequence: linked by caused_by, its
fix the root's, information; a drift with a cause of its own stays an error."""

from __future__ import annotations

from ddpdoctor.analysis.detectors.drift.consequence import link_drifts
from ddpdoctor.analysis.engine import order
from ddpdoctor.analysis.model import Finding
from ddpdoctor.kinds import FindingKind, Severity


def drift(cause: str, step: int = 1, site: str = "", ranks=(0, 1)) -> Finding:
    return Finding(FindingKind.REPLICA_DIVERGENCE, Severity.ERROR, ranks, None,
                   f"replicas drifted apart after step {step} (the first check): head.weight "
                   "differs between ranks 0 and 1; likely cause: something", "line one\nmore",
                   "the drift's own fix",
                   {"step": step, "replica_ranks": [0, 1], "cause": cause,
                    "causes": [{"kind": cause, "ranks": list(ranks), "site": site}]})


def reducer_error(iteration: int) -> Finding:
    return Finding(FindingKind.RANK_FAILED, Severity.ERROR, (0, 1), 4,
                   "`aux.weight` got no gradient on ranks 0 and 1 in iteration 0", "d",
                   "find_unused_parameters=True",
                   {"mechanism": "no_grad", "iteration": iteration, "parameters": ["aux.weight"]})


def skipped(iteration: int) -> Finding:
    return Finding(FindingKind.MISSING_COLLECTIVE, Severity.ERROR, (1,), 8,
                   "rank 1 skipped iteration 1", "d", "decide together",
                   {"skipped_iteration": {"rank": [1], "iteration": iteration}})


def test_unused_parameters_make_the_drift_their_consequence():
    found = order(link_drifts([drift("gradient_changed"), reducer_error(0)]))
    root, consequence = found
    assert root.kind == FindingKind.RANK_FAILED and consequence.caused_by == 0
    assert consequence.severity == Severity.INFO
    assert consequence.fix == "find_unused_parameters=True"
    assert consequence.evidence["cause"] == "consequence"
    assert "a consequence of the rank_failed above" in consequence.summary
    assert "likely cause: something" not in consequence.summary


def test_a_skipped_synced_backward_before_the_check_explains_the_drift():
    [_, d] = link_drifts([skipped(1), drift("unknown", step=2, ranks=(1,))])
    assert d.caused_by == 0
    [_, later] = link_drifts([skipped(2), drift("unknown", step=2, ranks=(1,))])
    assert later.caused_by is None and later.severity == Severity.ERROR  # it came after


def test_a_drift_with_its_own_cause_stays_an_error():
    for own in (drift("scheduler"), drift("write"), drift("hyperparameters"),
                drift("gradient_changed", site="/x/train.py:37")):
        [d, _] = link_drifts([own, reducer_error(0)])
        assert d.caused_by is None and d.severity == Severity.ERROR, own.evidence["cause"]


def test_different_synced_backward_counts_name_the_root_without_an_iteration():
    root = Finding(FindingKind.COLLECTIVE_MISMATCH, Severity.ERROR, (1,), 12, "s", "d", "f", {})
    [_, d] = link_drifts([root, drift("unsynced", step=4, ranks=(1,))])
    assert d.caused_by == 0
    [_, other] = link_drifts([root, drift("unknown", step=4)])
    assert other.caused_by is None
