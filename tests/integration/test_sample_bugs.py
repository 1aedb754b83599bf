"""Every catalogued bug under `ddpdoctor run`: the right finding blames the right ranks, and
the fixed twin runs clean."""

from __future__ import annotations

import pytest

from ddpdoctor import bugs

pytestmark = pytest.mark.slow

SAMPLE_BUGS = bugs.sample_bugs_dir()
ENTRIES = pytest.mark.parametrize("bug", bugs.CATALOGUE, ids=lambda b: b.name)


def run_sample(doctor, bug: bugs.Bug, fixed: bool):
    args = ["run", "--hang-timeout", str(bug.hang_timeout), *bugs.job_command(bug, fixed)]
    return doctor(args, cwd=SAMPLE_BUGS, timeout=300)


def describe(findings: list[dict]) -> str:
    return "; ".join(f"{f['kind']}/{f['severity']} ranks {f['ranks']}: {f['summary']}"
                     for f in findings) or "no findings"


@ENTRIES
def test_bug_is_named_with_its_culprits(doctor, bug):
    run = run_sample(doctor, bug, fixed=False)
    report = run.report
    findings = report["findings"]
    named = [f for f in findings if f["kind"] == bug.finding_kind]
    assert named, (f"{bug.name}: expected {bug.finding_kind}, got {describe(findings)}\n"
                   f"{run.stderr[-3000:]}")
    assert any(sorted(f["ranks"]) == sorted(bug.culprit_ranks) for f in named), (
        f"{bug.name}: {bug.finding_kind} should blame ranks {list(bug.culprit_ranks)}: "
        f"{describe(named)}")
    assert report["world_size"] == bug.nproc


@ENTRIES
def test_fixed_twin_runs_clean(doctor, bug):
    run = run_sample(doctor, bug, fixed=True)
    assert run.returncode == 0, run.stderr[-3000:]
    report = run.report
    assert report["outcome"] == "completed"
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    assert serious == [], f"{bug.name} fixed: {describe(serious)}"
    assert report["world_size"] == bug.nproc
