"""The bug catalogue under ``ddpdoctor lint``: every bug whose cause is in its source is flagged
at the culprit line; no fixed twin, compat job or example gets an error it does not mean.

The expectations are ddpdoctor/lint/catalogue.py's EXPECTED (one line a bug), which also
prints the README's table (``python docs/tools/lint_catalogue.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.bugs import CATALOGUE, sample_bugs_dir
from ddpdoctor.lint.catalogue import EXPECTED, Flagged, OutOfReach, measure
from ddpdoctor.lint.engine import lint_files
from ddpdoctor.lint.findings import Severity

ROOT = Path(__file__).resolve().parents[2]
BUG_NAMES = [bug.name for bug in CATALOGUE]
# Jobs that hang on purpose (a mode of the job, or the example's bug): the errors lint must
# find there, as (file relative to the repository, line). Any other error is a false one.
# (the jobs whose culprit raises, collectives.py BUG=raise and restart_once.py, are not here: an
# error no try catches ends the rank, and the launcher the job; the run names it rank_failed)
DELIBERATE = {
    ("examples/train_hang.py", 37),  # the example's bug: all_reduce under rank == 0
    ("tests/integration/jobs/collectives.py", 26),  # BUG=shape: a longer tensor on the culprit
    ("tests/integration/jobs/collectives.py", 31),  # BUG=op: a broadcast on the culprit only
    ("tests/integration/jobs/collectives.py", 41),  # BUG=barrier_rank0
    ("tests/integration/jobs/collectives.py", 44),  # BUG=barrier_node1
    ("tests/integration/jobs/collectives.py", 51),  # BUG=conditional
    ("tests/integration/jobs/rank0_barrier.py", 21),  # the hang this job exists for
    ("tests/integration/jobs/ddp_torch_bucket_hang.py", 26),  # rank 1 takes one step fewer
    ("tests/integration/jobs/new_group_on_one_rank.py", 28),  # new_group on rank 0 only
}
# Hangs on purpose that lint can only warn of: the loop over a rank's own share of the data
# (BUG=uneven_split/uneven_iterable loaders: shares sized from a table indexed by the rank;
# lint cannot tell shares that differ from shares that round to the same batch count)
DELIBERATE_WARNINGS = {("tests/integration/jobs/data_train.py", 142)}


@pytest.fixture(scope="module")
def measured():
    return {row.name: row for row in measure(sample_bugs_dir())}


@pytest.mark.parametrize("name", BUG_NAMES)
def test_bug_has_an_expectation(name):
    assert name in EXPECTED, (
        f"catalogue bug {name!r} has no lint expectation: add one line to EXPECTED in "
        f"ddpdoctor/lint/catalogue.py: {name!r}: Flagged(LINE, 'KIND', E|W) or "
        f"OutOfReach('why its cause is not in the source')")


@pytest.mark.parametrize("name", BUG_NAMES)
def test_bug_flagged_at_culprit_line(measured, name):
    expected = EXPECTED.get(name)
    row = measured[name]
    if isinstance(expected, OutOfReach):
        bug = next(b for b in CATALOGUE if b.name == name)
        if bug.finishes:  # a healthy (if slow) job: no error
            assert not [f for f in row.findings if f.severity == Severity.ERROR]
        return
    assert isinstance(expected, Flagged), f"{name}: no expectation in ddpdoctor/lint/catalogue.py"
    got = [(f.line, f.kind, f.severity.value) for f in row.findings]
    assert row.hit is not None, (f"{name}: expected {expected.kind} ({expected.severity.value}) "
                                 f"at line {expected.line}; lint found {got}")
    assert row.hit.condition is None or row.hit.condition.line < row.hit.line


@pytest.mark.parametrize("name", BUG_NAMES)
def test_fixed_twin_gets_no_error(measured, name):
    errors = [(f.line, f.kind, f.message) for f in measured[name].fixed_errors]
    assert not errors, f"{name}'s fixed twin: {errors}"


def test_compat_jobs_get_no_error():
    jobs = sorted((ROOT / "tests" / "compat" / "jobs").glob("*.py"))
    assert jobs
    errors = [f for f in lint_files(jobs) if f.severity == Severity.ERROR]
    assert not errors, [(f.file, f.line, f.kind, f.message) for f in errors]


def test_examples_and_test_jobs_get_only_their_deliberate_errors():
    files = sorted((ROOT / "examples").glob("*.py")) + \
        sorted((ROOT / "tests" / "integration" / "jobs").glob("*.py"))
    findings = lint_files(files)
    found = {(str(Path(f.file).relative_to(ROOT)), f.line) for f in findings
             if f.severity == Severity.ERROR}
    warned = {(str(Path(f.file).relative_to(ROOT)), f.line) for f in findings
              if f.severity == Severity.WARNING}
    assert found - DELIBERATE == set(), "false errors"
    assert DELIBERATE - found == set(), "deliberate bugs no longer found"
    assert DELIBERATE_WARNINGS - warned == set(), "deliberate bugs no longer warned of"
