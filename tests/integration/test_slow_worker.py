"""A rank whose DataLoader worker spends three hang timeouts on one sample (sleeping, as a
slow fetch does) while its main process waits on the worker queue and its peer waits in the
next all_reduce is a straggler, not a hang: the job ends by itself, exit 0, no error."""

from __future__ import annotations

import pytest

from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow
HANG_TIMEOUT = 3
SLOW_S = 9  # three hang timeouts in one __getitem__


def test_a_slow_dataloader_worker_is_not_stopped(doctor):
    run = doctor(warmed(["run", "--hang-timeout", str(HANG_TIMEOUT), "--nproc-per-node", "2",
                         str(JOBS / "slow_worker.py")]),
                 env={"SLOW_S": str(SLOW_S), "WORK": "sleep"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "rank 0 done" in run.stdout and "rank 1 done" in run.stdout
    report = run.report
    assert report["outcome"] == "completed" and "stopped" not in report
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert run.supervisor_events("straggler"), "the wait was never judged: the test proves nothing"
