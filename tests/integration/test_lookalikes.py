"""Healthy look-alikes of the bug classes, at four ranks: they must finish (exit 0) with no
error or warning.  Per-rank branches that stay balanced, and an uneven all_to_all_single
whose split sizes are exchanged first; a DataLoader worker that decodes one sample for three
hang timeouts (CPU) while its rank waits on the worker queue and three peers wait in the
next all-reduce.  (Two-rank look-alikes: test_slow_worker.py, test_slow_io.py, the
catalogue's fixed twins and busy_straggler_finishes.)"""

from __future__ import annotations

import pytest

from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow


def serious(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] in ("error", "warning")]


def test_balanced_branches_and_exchanged_splits_run_clean(doctor):
    run = doctor(warmed(["run", "--hang-timeout", "5", "--nproc-per-node", "4",
                         str(JOBS / "balanced_branches.py")]))
    assert run.returncode == 0, run.stderr[-3000:]
    assert all(f"rank {r} done" in run.stdout for r in range(4)), run.stdout[-2000:]
    assert run.report["outcome"] == "completed"
    assert serious(run.report) == [], serious(run.report)
    ops = {e["op"] for entries in run.report["timeline"].values() for e in entries}
    assert "all_to_all_single" in ops, ops  # the exchange was recorded: checked, not missed


def test_a_slow_decoding_worker_at_four_ranks_is_not_stopped(doctor):
    run = doctor(warmed(["run", "--hang-timeout", "3", "--nproc-per-node", "4",
                         str(JOBS / "slow_worker.py")]), env={"SLOW_S": "9", "WORK": "cpu"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert all(f"rank {r} done" in run.stdout for r in range(4))
    assert run.report["outcome"] == "completed"
    assert not [f for f in run.report["findings"] if f["severity"] == "error"]
    assert run.supervisor_events("straggler"), "the wait was never judged: the test proves nothing"
