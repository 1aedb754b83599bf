"""A live view of a job that still runs says "running", never "completed"; final reports keep
the contract's outcomes."""

from __future__ import annotations

import pytest

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.report import schema
from ddpdoctor.report.build import infer_outcome
from ddpdoctor.trace import layout as L
from ddpdoctor.tui.model import ReportView
from ddpdoctor.tui.widgets.run_summary import summary_text
from tests.unit.factory import job, rank, steps


def _running_job(live: bool):
    runs = [rank(r, steps(3)) for r in range(2)]
    return job(runs, outcome=None, live=live, hang_timeout=60.0)


def test_a_live_view_of_a_running_job_says_running_and_the_tui_shows_it() -> None:
    view = _running_job(live=True)
    assert infer_outcome(view) == "running"
    report = schema.build(view, diagnose(view).findings, infer_outcome(view))
    assert report["outcome"] == "running" and report["live"] is True
    shown = summary_text(ReportView.from_dict(report), now=0.0).plain
    assert "running" in shown and "COMPLETED" not in shown


def test_final_reports_keep_the_contract_outcomes() -> None:
    done = job([rank(r, steps(3), L.RankState.EXITED) for r in range(2)], outcome=None)
    assert infer_outcome(done) == "completed"
    assert schema.build(done, [], "completed")["outcome"] == "completed"
    view = _running_job(live=False)
    assert infer_outcome(view) == "completed"
    with pytest.raises(ValueError):  # a final report never takes the live-only outcome
        schema.build(view, [], "running")
