"""Which runs go (retention), ages, and `run --fail-on`'s exit status: rules on typed facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.config import FailOn
from ddpdoctor.errors import UserError
from ddpdoctor.report.outcome import status_under_fail_on
from ddpdoctor.rundir.retention import parse_age, plan
from ddpdoctor.rundir.runs import RunEntry

NOW = 1_800_000_000.0
DAY = 86400.0


def run(name: str, days_ago: float, live: bool = False, generated: bool = True) -> RunEntry:
    return RunEntry(Path("ddpdoctor-runs") / name, name, NOW - days_ago * DAY, "completed",
                    "train.py", 1 << 20, live, generated)


RUNS = [run("new-live", 0, live=True), run("mine", 0.5, generated=False), run("b", 1),
        run("c", 2), run("old-live", 3, live=True), run("d", 9)]


def names(runs: list[RunEntry]) -> list[str]:
    return [r.run_id for r in runs]


def test_keep_n_keeps_the_newest_runs_ddpdoctor_named_live_ones_counted():
    done = plan(RUNS, keep=2, now=NOW)
    assert names(done.remove) == ["c", "d"]
    assert names(done.live) == ["old-live"]  # past the newest 2, but live: kept
    assert done.kept == 4


def test_a_run_dir_the_user_named_is_never_counted_nor_removed():
    assert "mine" not in names(plan(RUNS, keep=0, now=NOW).remove)
    assert names(plan(RUNS, keep=0, now=NOW).remove) == ["b", "c", "d"]


def test_older_than_removes_by_age_alone():
    assert names(plan(RUNS, older_than=1.5 * DAY, now=NOW).remove) == ["c", "d"]
    assert names(plan(RUNS, older_than=30 * DAY, now=NOW).remove) == []


@pytest.mark.parametrize("text, seconds", [("30d", 30 * DAY), ("12h", 43200), ("90m", 5400),
                                           ("2w", 14 * DAY), ("45s", 45), ("1.5d", 1.5 * DAY)])
def test_ages(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "-1d", "7 days", "1y"])
def test_a_bad_age_is_a_usage_error(text):
    with pytest.raises(UserError) as e:
        parse_age(text)
    assert e.value.exit_code == 2 and "not an age" in str(e.value)


def report(*severities: str) -> dict:
    return {"findings": [{"kind": f"k{i}", "severity": s} for i, s in enumerate(severities)]}


@pytest.mark.parametrize("status, found, fail_on, expected", [
    (0, report("warning"), FailOn.WARNING, 1),
    (0, report("info", "error"), FailOn.ERROR, 1),
    (0, report("warning", "info"), FailOn.ERROR, 0),
    (0, report("error"), FailOn.NEVER, 0),
    (0, report("info"), FailOn.WARNING, 0),
    (0, report(), FailOn.WARNING, 0),
    (3, report("error"), FailOn.WARNING, 3),  # the job's own failure stands
    (124, report("error"), FailOn.ERROR, 124),
    (130, report("warning"), FailOn.WARNING, 130),
    (0, None, FailOn.ERROR, 0),  # no report: nothing to judge
])
def test_fail_on_turns_only_a_zero_into_one(status, found, fail_on, expected):
    assert status_under_fail_on(status, found, fail_on)[0] == expected


def test_fail_on_says_which_finding():
    _, why = status_under_fail_on(0, report("info", "warning"), FailOn.WARNING)
    assert why == "exit 1 (--fail-on warning): the job exited 0, but finding 2 is a warning (k1)"
