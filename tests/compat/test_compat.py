"""Frameworks and torch DDP features train the same under ddpdoctor as without it.

Each job (tests/compat/jobs/) runs three times on 2 CPU ranks: plain, under ``ddpdoctor
run`` (the ring comm hook) and under ``ddpdoctor run --ddp torch``; each must exit 0 and
save the same final parameters as the plain run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, run_doctor
from tests.integration.sample_runs import once

pytestmark = pytest.mark.slow

JOBS_DIR = REPO / "tests" / "compat" / "jobs"
TOL = 1e-6
# job -> (how it starts, script)
JOBS = {
    "torch_features": ("torchrun", "torch_features.py"),
    "lightning_self_launched": ("python", "lightning_job.py"),
    "lightning_torchrun": ("torchrun", "lightning_job.py"),
    "accelerate": ("torchrun", "accelerate_job.py"),
    "ignite": ("torchrun", "ignite_job.py"),
    "transformers": ("torchrun", "transformers_job.py"),
}
# The default (ring) path runs under every framework; --ddp torch (torch's own DDP, its
# buckets recorded) under one launcher-driven framework and the torch feature job.
CASES = [(job, "ring") for job in JOBS] + [("torch_features", "torch"),
                                           ("lightning_torchrun", "torch")]


def command(job: str, out: Path) -> list[str]:
    form, script = JOBS[job]
    if form == "python":
        return [sys.executable, str(JOBS_DIR / script), str(out)]
    launcher = shutil.which("torchrun")
    prefix = [launcher] if launcher else [sys.executable, "-m", "torch.distributed.run"]
    return [*prefix, "--nproc-per-node", "2", str(JOBS_DIR / script), str(out)]


def load(out: Path) -> list[dict]:
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def plain_run(job: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The job's final parameters without ddpdoctor: one plain run per session, which every
    mode's test compares with."""
    def make(out: Path) -> None:
        for _ in range(2):  # gloo itself now and then aborts a rank at teardown (SIGABRT,
            # pytorch/gloo#155), with or without ddpdoctor: this test is about the doctored job
            proc = subprocess.run(command(job, out), cwd=out, capture_output=True, text=True,
                                  timeout=400, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            if "SIGABRT" not in proc.stderr and proc.returncode != -6:
                break
        assert proc.returncode == 0, proc.stderr[-3000:]

    return load(once(tmp_path_factory, f"plain_{job}", make))


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert list(a) == list(b)
    return max(((x.double() - y.double()).abs().max().item() for x, y in zip(a.values(),
                                                                             b.values())
                if x.is_floating_point()), default=0.0)


@pytest.mark.parametrize("job,mode", CASES)
def test_trains_as_without_ddpdoctor(job: str, mode: str, tmp_path: Path,
                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    plain = plain_run(job, tmp_path_factory)
    out = tmp_path / "out"
    out.mkdir()
    run = run_doctor(["run", "--ddp", mode, "--", *command(job, out)], tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    report = run.report
    assert report["outcome"] == "completed"
    assert [f["summary"] for f in report["findings"] if f["severity"] == "error"] == []
    ours = load(out)
    for rank in range(2):
        assert ours[rank]["checks"] == plain[rank]["checks"]
        assert all(plain[rank]["checks"].values()), plain[rank]["checks"]
        assert set(ours[rank]["params"]) == set(plain[rank]["params"])
        for case, params in plain[rank]["params"].items():
            diff = max_diff(ours[rank]["params"][case], params)
            assert diff <= TOL, f"rank {rank} {case}: parameters differ by {diff:.3g}"
    if job == "torch_features":  # sparse gradients: said once, on the console and in the report
        assert run.stderr.count("ddpdoctor: notice: sparse gradients") == 1, run.stderr[-3000:]
        assert [(n["text"][:16], n["ranks"]) for n in report["notices"]] == [
            ("sparse gradients", [0, 1])]
    kinds = record_kinds(run.run_dir)
    assert kinds["bucket"] > 0  # every DDP bucket is recorded, in both modes
    assert (kinds["ring_step"] > 0) == (mode == "ring")  # the ring reduced them (ring mode)


def record_kinds(run_dir: Path) -> dict[str, int]:
    """How many bucket all-reduces the job's ranks hold (their traces, joined with the
    flight recorder dumps the ranks write at exit: --ddp torch on gloo leaves its buckets
    to the recorder) and how many ring steps their traces hold."""
    from ddpdoctor.analysis.load.run_dirs import load_job
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.reader import read_trace

    job = load_job([run_dir])
    kinds = {"bucket": sum(1 for run in job.ranks.values() for calls in run.calls.values()
                           for c in calls if c.flags & L.RecordFlag.BUCKET), "ring_step": 0}
    for path in (run_dir / "traces").glob("*.ring"):
        kinds["ring_step"] += sum(r.kind == L.RecordKind.RING_STEP
                                  for r in read_trace(path).records)
    return kinds
