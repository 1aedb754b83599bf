"""The root-cause detectors on real 2-rank gloo jobs (tests/integration/jobs/data_train.py),
each bug with a healthy twin that must get no such finding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JOBS, DoctorRun, warm_launch
from tests.integration.sample_runs import shared_run
from ddpdoctor.analysis.causal.uneven import predict_uneven

pytestmark = pytest.mark.slow

JOB = str(JOBS / "data_train.py")
SILENT_KINDS = ("seed_collision", "stale_shuffle", "duplicate_data")
# run --fail-on, for CI, on runs made anyway: a healthy job and one with a warning alone
FAIL_ON = {"healthy": "warning", "stale": "warning", "seed": "error"}


@pytest.fixture
def job(tmp_path_factory: pytest.TempPathFactory):
    """data_train.py with BUG=name, run once per session (several tests read one run)."""

    def _job(bug: str, **env: str) -> DoctorRun:
        key = "data_train-" + "-".join([bug, *(f"{k}={v}" for k, v in sorted(env.items()))])
        fail_on = ["--fail-on", FAIL_ON[bug]] if bug in FAIL_ON and not env else []
        run = shared_run(tmp_path_factory, key, ["run", "--hang-timeout", "5", *fail_on,
                                                 *warm_launch(2, JOB)],
                         env={"BUG": bug, **env})
        assert (run.run_dir / "report.json").exists(), run.stderr[-3000:]
        return run

    return _job


def kinds(run: DoctorRun) -> list[str]:
    return [f["kind"] for f in run.report["findings"]]


def assert_healthy(run: DoctorRun, also_absent: tuple[str, ...] = ()) -> None:
    report = run.report
    assert report["outcome"] == "completed", (kinds(run), run.stderr[-2000:])
    assert run.returncode == 0
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert not errors, errors
    present = set(kinds(run)) & set(SILENT_KINDS + also_absent)
    assert not present, report["findings"]


def the(run: DoctorRun, kind: str) -> dict[str, Any]:
    found = run.findings(kind)
    assert len(found) == 1, (kinds(run), run.report.get("problems"))
    return found[0]


# -- healthy twins ---------------------------------------------------------------------------
# (the healthy variants seed_no_random, even_split and val_rank0 of data_train.py are the
# easy cases of seed_model_only, even_iterable and val_rank0_one_line: not run, for time)
@pytest.mark.parametrize("bug", ["healthy", "seed_model_only", "even_iterable",
                                 "worker_seed_ok", "val_rank0_one_line"])
def test_healthy_jobs_get_no_data_findings(job, bug: str) -> None:
    run = job(bug)
    assert_healthy(run, also_absent=("uneven_batches", "straggler"))
    assert not run.report["problems"], run.report["problems"]


def test_loaders_iterated_from_one_line_are_told_apart(job) -> None:
    from ddpdoctor.analysis.load.run_dirs import load_job

    view = load_job([job("val_rank0_one_line").run_dir])
    starts = {r: run.trace.meta_events("loader_epoch") for r, run in view.ranks.items()}
    assert len({s["site"] for s in starts[0]}) == 1  # train and val: one iterating line
    assert len({s["loader"] for s in starts[0]}) == 2  # ... two loaders
    assert {s["loader"] for s in starts[1]} < {s["loader"] for s in starts[0]}
    assert [s["epoch"] for s in starts[1]] == [0, 1]


def test_the_probes_record_epochs_batches_and_rng(job) -> None:
    run = job("healthy")
    from ddpdoctor.analysis.load.run_dirs import load_job

    view = load_job([run.run_dir])
    assert sorted(view.ranks) == [0, 1]
    for rank, r in view.ranks.items():
        starts = r.trace.meta_events("loader_epoch")
        ends = r.trace.meta_events("loader_end")
        assert [s["epoch"] for s in starts] == [0, 1]
        assert "data_train.py:" in starts[0]["site"]  # the line of the training loop
        assert r.header.epoch == 1
        assert starts[0]["length"] == 6 and starts[0]["sampler"] == "DistributedSampler"
        assert [e["batches"] for e in ends] == [6, 6]
        assert [m["epoch"] for m in r.trace.meta_events("set_epoch")] == [0, 1]
        assert [m["batch"] for m in r.trace.meta_events("rng")] == [0, 1, 3]
        assert len(r.batches) == 12 and {b.aux for b in r.batches} == {0, 1}
        assert all(b.numel == 4 for b in r.batches)
        assert not r.trace.meta_events("runtime_error")


# -- seed_collision --------------------------------------------------------------------------
def test_one_seed_with_dropout_is_a_seed_collision(job) -> None:
    run = job("seed")
    f = the(run, "seed_collision")
    assert f["severity"] == "warning" and f["ranks"] == [0, 1]
    assert run.returncode == 0, run.stderr[-2000:]  # --fail-on error: a warning passes
    assert "torch" in f["evidence"]["generators"]
    assert "python" in f["evidence"]["generators"]
    assert "manual_seed" in f["fix"]


def test_one_seed_in_augmenting_workers_is_a_seed_collision(job) -> None:
    run = job("worker_seed")
    f = the(run, "seed_collision")
    assert f["ranks"] == [0, 1]
    assert f["evidence"]["workers"]["consumed"]["0"] == ["torch"]
    assert "generators" not in f["evidence"]  # the ranks' own RNGs draw nothing


def test_spawned_workers_drawing_from_one_state_collide(job) -> None:
    """Workers started by spawn import torch afresh: their fetches are probed too."""
    run = job("worker_seed", WORKERS_START="spawn")
    f = the(run, "seed_collision")
    assert f["ranks"] == [0, 1]
    assert f["evidence"]["workers"]["consumed"]["0"] == ["torch"]


# -- stale_shuffle / duplicate_data --------------------------------------------------------
def test_no_set_epoch_is_a_stale_shuffle(job) -> None:
    run = job("stale")
    f = the(run, "stale_shuffle")
    assert f["severity"] == "warning" and f["ranks"] == [0, 1]
    assert "set_epoch was never called" in f["summary"]
    assert f["evidence"]["epochs"] == {"0": [1], "1": [1]}
    assert "duplicate_data" not in kinds(run)
    # --fail-on warning: the job exited 0 and trained wrong, so CI fails it (exit 1)
    assert run.report["outcome"] == "completed" and run.returncode == 1, run.stderr[-2000:]
    number = kinds(run).index("stale_shuffle") + 1
    assert (f"ddpdoctor: exit 1 (--fail-on warning): the job exited 0, but finding {number} "
            "is a warning (stale_shuffle)") in run.stderr


def test_an_unsharded_loader_is_duplicate_data(job) -> None:
    run = job("duplicate")
    f = the(run, "duplicate_data")
    assert f["severity"] == "warning" and f["ranks"] == [0, 1]
    assert "DistributedSampler" in f["fix"]
    assert "stale_shuffle" not in kinds(run)  # a sequential loader repeats by design


# -- uneven_batches --------------------------------------------------------------------------
@pytest.mark.parametrize("bug,fewer,counts,predicted", [
    ("uneven_sampler", 0, {"0": 4, "1": 5}, True),
    ("uneven_split", 1, {"0": 4, "1": 3}, True),
    ("uneven_iterable", 0, {"0": 3, "1": 4}, False),
])
def test_uneven_batches_names_the_rank_with_fewer_batches(job, bug: str, fewer: int,
                                                          counts: dict, predicted: bool) -> None:
    run = job(bug)
    report = run.report
    assert report["outcome"] in ("hung", "failed"), kinds(run)
    f = report["findings"][0]
    assert f["kind"] == "uneven_batches", kinds(run)
    assert f["severity"] == "error" and f["ranks"] == [fewer]
    assert f["evidence"]["batches"] == counts and f["evidence"]["confirmed"]
    assert "drop_last" in f["fix"] and "Join" in f["fix"]
    assert not [m for m in run.findings("missing_collective") if fewer in m["ranks"]]
    assert not [m for m in run.findings("rank_failed") if m["severity"] == "error"]
    assert "duplicate_data" not in kinds(run)
    if predicted:
        verdicts = run.supervisor_events("verdict") or run.supervisor_events("outcome")
        assert 0 < f["evidence"]["predicted_at_ns"] < verdicts[0]["t"]
        announced = run.supervisor_events("prediction")  # said live, before the hang
        assert announced and announced[0]["ranks"] == [fewer]
        assert announced[0]["t"] < verdicts[0]["t"]
        live = predict_uneven(run.run_dir)
        assert live is not None and live.ranks == (fewer,)
        assert live.evidence["predicted"] == counts
    else:
        assert f["evidence"]["predicted_at_ns"] is not None  # the epoch start, not a length
        assert predict_uneven(run.run_dir) is None  # no len(): nothing to predict


def test_uneven_batches_outranks_the_mismatch_it_causes(job) -> None:
    run = job("uneven_barrier")  # the short rank reaches a barrier after its loop
    first, *rest = run.report["findings"]
    assert first["kind"] == "uneven_batches" and first["ranks"] == [1]
    (mismatch,) = [f for f in rest if f["kind"] == "collective_mismatch"]
    assert mismatch["severity"] == "info" and mismatch["seq"] == first["seq"]
    assert "consequence of the uneven batches" in mismatch["summary"]


def test_predict_uneven_is_quiet_on_even_jobs(job) -> None:
    assert predict_uneven(job("even_split").run_dir) is None
    assert predict_uneven(job("healthy").run_dir) is None


# -- straggler --------------------------------------------------------------------------------
def test_a_slow_rank_is_a_straggler(job) -> None:
    run = job("straggler")
    f = the(run, "straggler")
    assert f["ranks"] == [1]
    assert f["evidence"]["median_lag_s"] > 0.1
    assert f["severity"] in ("warning", "info")
    assert_healthy(run)


def test_the_healthy_job_has_no_straggler(job) -> None:
    assert "straggler" not in kinds(job("healthy"))


def test_chrome_trace_export_of_a_real_run(job, tmp_path: Path) -> None:
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" /
                           "ddpdoctor-chrome-trace" / "src"))
    try:
        import ddpdoctor_chrome_trace as chrome
        from ddpdoctor.analysis.load.run_dirs import load_job
    finally:
        sys.path.pop(0)
    run = job("uneven_split")
    out = tmp_path / "trace.json"
    chrome.export(load_job([run.run_dir]), out)
    doc = json.loads(out.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert len(names) == 2
    assert any(e["cat"] == "collective" and "seq" in e["args"] and e["args"]["callsite"]
               for e in slices)
    ring = [e for e in slices if e["cat"] == "ring"]
    assert all(isinstance(e["args"]["seq"], int) for e in ring)
