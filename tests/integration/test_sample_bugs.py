"""Every catalogued bug under `ddpdoctor run`: the right finding blames the right ranks, and
the fixed twin runs clean.  A job torchrun would start gets its ranks forked by the suite's
launcher (tests/integration/jobs/warm_torchrun.py, for CPU); the ``--ddp torch`` runs below
start theirs with torchrun itself, as the catalogue says."""

from __future__ import annotations

import pytest

from ddpdoctor import bugs
from tests.fix_agreement import disagreement
from tests.integration.sample_runs import sample_run
from tests.integration.test_repro_catalogue import check_repro, replay_twins, twin_repro

pytestmark = pytest.mark.slow

SAMPLE_BUGS = bugs.sample_bugs_dir()
ENTRIES = pytest.mark.parametrize("bug", bugs.CATALOGUE, ids=lambda b: b.name)


def describe(findings: list[dict]) -> str:
    return "; ".join(f"{f['kind']}/{f['severity']} ranks {f['ranks']}: {f['summary']}"
                     for f in findings) or "no findings"


HANGS_AND_FAILURES = pytest.mark.parametrize(
    "bug", [b for b in bugs.CATALOGUE if not b.finishes], ids=lambda b: b.name)
FINISHES = pytest.mark.parametrize(
    "bug", [b for b in bugs.CATALOGUE if b.finishes], ids=lambda b: b.name)


def check_root_cause_first(bug: bugs.Bug, findings: list[dict]) -> None:
    """The first error finding names the culprits; no error finding blames a rank that only
    waited (its own errors are consequences: info, with caused_by)."""
    errors = [f for f in findings if f["severity"] == "error"]
    named = [f for f in findings if f["kind"] == bug.finding_kind]
    assert named and named[0]["severity"] != "info", (
        f"{bug.name}: no {bug.finding_kind} finding above info: {describe(findings)}")
    if named[0]["severity"] == "error":
        first = errors[0]
        assert first["kind"] == bug.finding_kind and \
            sorted(first["ranks"]) == sorted(bug.culprit_ranks), (
                f"{bug.name}: the first error should be {bug.finding_kind} on "
                f"{list(bug.culprit_ranks)}: {describe(findings)}")
    waited = [f for f in errors if not set(f["ranks"]) <= set(bug.culprit_ranks)]
    assert waited == [], f"{bug.name}: errors blame a rank that only waited: {describe(waited)}"
    for f in errors:  # every Fix: line follows the cause its finding states
        assert disagreement(f) is None, f"{bug.name}: {disagreement(f)}: {f['fix']}"


@HANGS_AND_FAILURES
def test_bug_is_named_with_its_culprits(tmp_path_factory, bug, tmp_path):
    run = sample_run(tmp_path_factory, bug, fixed=False)
    report = run.report
    findings = report["findings"]
    named = [f for f in findings if f["kind"] == bug.finding_kind]
    assert named, (f"{bug.name}: expected {bug.finding_kind}, got {describe(findings)}\n"
                   f"{run.stderr[-3000:]}")
    assert any(sorted(f["ranks"]) == sorted(bug.culprit_ranks) for f in named), (
        f"{bug.name}: {bug.finding_kind} should blame ranks {list(bug.culprit_ranks)}: "
        f"{describe(named)}")
    check_root_cause_first(bug, findings)
    assert report["world_size"] == bug.nproc
    assert "Unable to cast" not in run.stderr, run.stderr[-3000:]  # a failed bucket raised
    check_repro(bug, run.run_dir, tmp_path / "repro")


@FINISHES
def test_slow_healthy_job_runs_to_its_end(tmp_path_factory, bug):
    run = sample_run(tmp_path_factory, bug, fixed=False)
    assert run.returncode == 0, f"{bug.name}: the job was stopped\n{run.stderr[-3000:]}"
    report = run.report
    assert report["outcome"] == "completed"
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors == [], f"{bug.name}: {describe(errors)}"
    for f in report["findings"]:
        if f["kind"] == bug.finding_kind:
            assert sorted(f["ranks"]) == sorted(bug.culprit_ranks), describe([f])


def teardown_abort_only(report: dict) -> bool:
    """torch 2.13's gloo sometimes aborts a rank at teardown after every collective completed
    (SIGABRT, "terminate called without an active exception"): tolerated only when the
    report names exactly that (a rank_failed finding marked teardown) and nothing else; the
    other ranks may have been terminated by torchrun (SIGTERM) once the aborted one died."""
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    failed = [r for r in report["ranks"] if r.get("exit_code") not in (0, None)]
    codes = {r["exit_code"] for r in failed}
    return bool(serious) and -6 in codes and codes <= {-6, -15} and all(
        f["kind"] == "rank_failed" and (f.get("evidence") or {}).get("teardown") is True
        for f in serious)


@ENTRIES
def test_fixed_twin_runs_clean(tmp_path_factory, bug, tmp_path):
    run = sample_run(tmp_path_factory, bug, fixed=True)
    report = run.report
    if run.returncode != 0 and teardown_abort_only(report):
        return  # the abort is gloo's, named as such; the twin's own work was clean
    assert run.returncode == 0, run.stderr[-3000:]
    assert report["outcome"] == "completed"
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    assert serious == [], f"{bug.name} fixed: {describe(serious)}"
    assert report["world_size"] == bug.nproc
    twin_repro(tmp_path_factory, bug)  # replayed by test_fixed_twins_repros_end_cleanly


def twin_batches(per_batch: int = 10) -> list[tuple[int, int]]:
    """(nproc, batch) of the fixed twins' replays: at most ``per_batch`` twins of one world
    size a batch, so that the batches (each one job, its twins in turn) run side by side."""
    out = []
    for n in sorted({b.nproc for b in bugs.CATALOGUE}):
        count = sum(1 for b in bugs.CATALOGUE if b.nproc == n)
        out += [(n, i) for i in range((count + per_batch - 1) // per_batch)]
    return out


@pytest.mark.timeout(1200)  # it runs the twins not yet run by their own tests, in turn
@pytest.mark.parametrize("nproc,batch", twin_batches())
def test_fixed_twins_repros_end_cleanly(tmp_path_factory, nproc, batch, tmp_path):
    """The repro of every fixed twin with ``nproc`` ranks ends cleanly (exit 0), each
    replayed in turn by the ranks of one job (ten twins a job)."""
    twins = [b for b in bugs.CATALOGUE if b.nproc == nproc][batch * 10:batch * 10 + 10]
    proc = replay_twins(tmp_path_factory, twins, nproc, tmp_path)
    replayed = [line.split()[1] for line in proc.stdout.splitlines()
                if line.startswith("replayed ")]
    assert proc.returncode == 0 and len(replayed) == len(twins), (
        f"replayed {replayed} of {[b.name for b in twins]}, exit {proc.returncode}\n"
        f"{proc.stderr[-3000:]}")


DDP_TORCH_BUGS = ("early_stop_per_rank", "unused_parameters", "crash_mid_epoch",
                  "last_batch_hand_split", "clean_exit_uneven_no_loader", "oom_killed_mid_epoch")


@pytest.mark.parametrize("name", DDP_TORCH_BUGS)
def test_bug_under_ddp_torch_is_named_and_raises_torchs_own_error(doctor, name):
    """--ddp torch (torch's reducer as it is, on ddpdoctor's recording process group):
    the same culprit, and the waiting rank's error as torch's C++ hook raises it."""
    [bug] = [b for b in bugs.CATALOGUE if b.name == name]
    args = ["run", "--ddp", "torch", "--hang-timeout", str(bug.hang_timeout),
            *bugs.job_command(bug, False)]
    run = doctor(args, cwd=SAMPLE_BUGS, timeout=300)
    findings = run.report["findings"]
    assert any(f["kind"] == bug.finding_kind and sorted(f["ranks"]) == sorted(bug.culprit_ranks)
               for f in findings), describe(findings)
    check_root_cause_first(bug, findings)
    for text in ("Unable to cast", "Got the following error when running the callback"):
        assert text not in run.stderr, run.stderr[-3000:]
