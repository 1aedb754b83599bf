"""Blame from each rank's recorded control flow, on real jobs (Python 3.12+; the CI's 3.13
smoke runs these): the shapes issue 51 described, each with its fixed twin.  The first error
finding names the culprit (or every side where no majority tells), the line where the ranks
decided, and never the rank that only waited; the twin runs clean."""

from __future__ import annotations

import pytest

from ddpdoctor.runtime.control_flow import SUPPORTED
from tests.conftest import JOBS, warmed

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SUPPORTED, reason="sys.monitoring: Python 3.12+")]
DECISIONS = JOBS / "decisions"

# name -> (culprit ranks, the line the decision is named at, a word of the summary)
SHAPES = {
    "writer_close": ((0,), 40, "writer is not None"),
    "resume_state": ((0, 1), 25, "os.path.exists(state_path)"),
    "early_return": ((1,), 21, "x.shape[0] == 0"),
    "pipe_skip": ((0,), 17, "mb.sum() == 0"),
    "p2p_short": ((1,), None, "size differs"),
    "poll_file": ((1,), 24, "while not os.path.exists(flag)"),
}


def _first_error(report: dict) -> dict:
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors, report["findings"]
    return errors[0]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_decision_names_the_culprit_and_its_line(doctor, tmp_path, name):
    culprits, line, words = SHAPES[name]
    run = doctor(warmed(["run", "--hang-timeout", "3", "--wait-bound", "10",
                         "--nproc-per-node", "2", str(DECISIONS / f"{name}.py")]),
                 env={"OUT": str(tmp_path)})
    assert run.returncode in (1, 124), run.stderr[-3000:]
    f = _first_error(run.report)
    assert tuple(f["ranks"]) == culprits, f["summary"]
    assert words in f["summary"], f["summary"]
    if line is not None:
        at = f["evidence"].get("decision") or next(iter(f["evidence"]["loop"].values()))
        assert f"{name}.py:{line}" in f["summary"]
        assert at["line"] == line, at
    if len(culprits) > 1:
        assert f["evidence"]["no_majority"] is True


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_fixed_twin_runs_clean(doctor, tmp_path, name):
    run = doctor(warmed(["run", "--hang-timeout", "3", "--wait-bound", "10",
                         "--nproc-per-node", "2", str(DECISIONS / f"{name}.py")]),
                 env={"OUT": str(tmp_path), "FIXED": "1", "WRITE_S": "4"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert not [f for f in run.report["findings"] if f["severity"] == "error"]
