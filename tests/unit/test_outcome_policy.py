"""The outcome policy (report/outcome.py) and the finished report (report/finished.py): for
each way a run ends, the outcome and exit status it gets, and what the supervisor adds to
the report built from the run dir."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ddpdoctor.report.finished import RunFacts, finish_report
from ddpdoctor.report.outcome import (EXIT_HUNG, RunEnd, exit_status, final_outcome,
                                      recorded_outcome)

ERROR = {"kind": "collective_mismatch", "severity": "error"}


@pytest.mark.parametrize("end,code,recorded,status", [
    (RunEnd.ENDED, 0, "completed", 0),
    (RunEnd.ENDED, 3, "failed", 3),
    (RunEnd.HUNG, None, "hung", EXIT_HUNG),
    (RunEnd.NODE0_SILENT, None, "hung", EXIT_HUNG),
    (RunEnd.RESTARTED, None, "failed", 1),
    (RunEnd.INTERRUPTED, None, None, 130),
])
def test_each_ending_records_its_outcome_and_exits_with_its_status(end, code, recorded,
                                                                   status):
    assert recorded_outcome(end, code) == recorded
    assert exit_status(end, code, signal.SIGINT) == status


def test_a_job_that_exits_0_with_an_error_finding_failed():
    assert final_outcome(RunEnd.ENDED, "completed", [ERROR], 0) == "failed"
    assert final_outcome(RunEnd.ENDED, "completed", [{"severity": "warning"}], 0) == \
        "completed"
    assert final_outcome(RunEnd.HUNG, "hung", [ERROR]) == "hung"
    assert final_outcome(RunEnd.INTERRUPTED, "running", []) == "interrupted"


def built(ranks: list | None = None) -> dict:
    return {"schema": "ddpdoctor.report/1", "outcome": "hung", "ranks": ranks or [{"rank": 0}],
            "findings": [ERROR], "problems": ["seen by the analysis"], "live": True}


def test_the_report_at_a_verdict_and_once_the_job_is_over(tmp_path: Path):
    report = built()
    early = finish_report(report, RunFacts(RunEnd.HUNG, ("train.py",), over=False), tmp_path)
    assert early["live"] is True and early["exit_code"] is None
    assert "job_exit_code" not in early and "stopped" not in early
    stopped = {"reason": "hang", "signal": "SIGTERM", "pids": [5], "sigkill": []}
    final = finish_report(report, RunFacts(RunEnd.HUNG, ("train.py", "--token=abc"),
                                           EXIT_HUNG, -15, problems=("py-spy failed",),
                                           stopped=stopped), tmp_path)
    assert final["live"] is False and final["exit_code"] == EXIT_HUNG
    assert final["job_exit_code"] == -15 and final["stopped"] == stopped
    assert final["problems"] == ["seen by the analysis", "py-spy failed"]
    assert final["outcome"] == "hung"
    assert report == built()  # one build finished twice: the build itself is left as it is


def test_an_interrupted_run_says_what_ended_it(tmp_path: Path):
    final = finish_report(built(), RunFacts(RunEnd.INTERRUPTED, ("t.py",), 143, None,
                                            signal.SIGTERM), tmp_path)
    assert final["outcome"] == "interrupted" and final["interrupted_by"] == "SIGTERM"
    assert final["notes"] == ["interrupted by SIGTERM"]


def test_a_job_that_ended_by_itself_keeps_no_job_status_apart(tmp_path: Path):
    final = finish_report(built(), RunFacts(RunEnd.ENDED, ("t.py",), 0, 0, attempt=2,
                                            nodes=({"node": "0"},)), tmp_path)
    assert "job_exit_code" not in final and final["outcome"] == "failed"
    assert final["attempt"] == 2 and final["nodes"] == [{"node": "0"}]


def test_a_report_without_ranks_says_why(tmp_path: Path):
    final = finish_report(built(ranks=[]) | {"ranks": []},
                          RunFacts(RunEnd.ENDED, ("t.py",), 1, 1), tmp_path)
    assert final["notes"] and "init_process_group" in final["notes"][0]
