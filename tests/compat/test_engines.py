"""Engines beyond DDP train the same under ddpdoctor as without it, with no finding.

torch's FSDP1, FSDP2, DTensor tensor parallel and a GPipe pipeline (one job, jobs/engines.py),
Lightning Fabric (jobs/fabric_job.py) and, where it is installed, DeepSpeed ZeRO stages 0-2
(jobs/deepspeed_job.py: not in the test extras, see docs/compatibility.md), each on 2 CPU
ranks (gloo) under torchrun: plain, then under ``ddpdoctor run``; exit 0, no finding, and
bit-identical final parameters.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, run_doctor
from tests.integration.sample_runs import once

pytestmark = pytest.mark.slow

JOBS_DIR = REPO / "tests" / "compat" / "jobs"
JOBS = {"torch_engines": "engines.py", "fabric": "fabric_job.py",
        "deepspeed": "deepspeed_job.py"}
ENV = {"PYTHONWARNINGS": "ignore", "DS_ACCELERATOR": "cpu"}


def command(job: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            str(JOBS_DIR / JOBS[job]), str(out)]


def load(out: Path) -> list[dict]:
    return [torch.load(out / f"rank{r}.pt", weights_only=False)["params"] for r in range(2)]


@pytest.mark.parametrize("job", list(JOBS))
def test_engine_trains_as_without_ddpdoctor_with_no_finding(
        job: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    if job == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (pip install deepspeed==0.19.0)")

    def plain(out: Path) -> None:
        proc = subprocess.run(command(job, out), cwd=out, capture_output=True, text=True,
                              timeout=400, env={**os.environ, **ENV})
        assert proc.returncode == 0, proc.stderr[-3000:]

    expected = load(once(tmp_path_factory, f"plain_{job}", plain))
    out = tmp_path / "out"
    out.mkdir()
    run = run_doctor(["run", "--", *command(job, out)], tmp_path, env=ENV, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.report["outcome"] == "completed"
    assert [f["summary"] for f in run.report["findings"]] == []
    ours = load(out)
    for rank in range(2):
        assert set(ours[rank]) == set(expected[rank])
        for case, params in expected[rank].items():
            for name, value in params.items():
                assert torch.equal(ours[rank][case][name], value), (rank, case, name)
