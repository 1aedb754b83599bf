"""A process group created by rank 0 only (``new_group([0])`` under ``if rank == 0``) shifts
every later group: the first error names rank 0 at that new_group line, and no error names
rank 1, which only called the groups every rank was meant to call."""

from __future__ import annotations

import pytest

from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow


def test_a_group_made_by_one_rank_is_named_at_its_line(doctor):
    run = doctor(warmed(["run", "--hang-timeout", "5", "--nproc-per-node", "2",
                         str(JOBS / "new_group_on_one_rank.py")]))
    assert run.returncode == 124, run.stderr[-3000:]
    errors = [f for f in run.report["findings"] if f["severity"] == "error"]
    assert errors, run.report["findings"]
    first = errors[0]
    assert (first["kind"], first["ranks"]) == ("collective_mismatch", [0]), first
    assert "new_group([0]) at new_group_on_one_rank.py:28" in first["summary"], first
    assert not [f for f in errors if 1 in f["ranks"]], errors
