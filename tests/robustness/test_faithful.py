"""Faithfulness: a healthy job under ddpdoctor exits the same, prints the same and trains
the same parameters as without it (--ddp torch, and the default ring DDP)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .helpers import TRAIN, free_port, run_args, run_doctor

pytestmark = pytest.mark.slow

def _job_lines(text: str) -> list[str]:
    return sorted(ln for ln in text.splitlines() if ln.startswith("JOB|"))


def _params(out: Path) -> list[np.ndarray]:
    return [np.load(out / f"params-rank{r}.npy", allow_pickle=False) for r in (0, 1)]


def _baseline(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """The job under plain torchrun.  Tried twice: gloo itself now and then aborts a rank
    (SIGABRT) that tears its connections down right after a barrier (pytorch/gloo#155),
    with or without ddpdoctor, and this test is about the doctored job."""
    out = tmp_path / "plain"
    out.mkdir()
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
             "--master-port", str(free_port()), str(TRAIN)],
            env={**os.environ, **env, "OUT_DIR": str(out)}, capture_output=True, text=True,
            timeout=180, check=False)
        if "(SIGABRT)" not in done.stderr:
            break
    return done, out


def _doctored(tmp_path: Path, ddp: str, env: dict[str, str]):
    out = tmp_path / f"doctor-{ddp}"
    out.mkdir()
    done = run_doctor([*run_args(tmp_path / "run", "--ddp", ddp), str(TRAIN)],
                      env={**env, "OUT_DIR": str(out)})
    return done, out


DDPS = ["torch", "ring"]


@pytest.mark.parametrize("ddp", DDPS)
def test_healthy_job_is_unchanged(tmp_path, ddp):
    env = {"MODE": "train", "STEPS": "15"}
    plain, plain_out = _baseline(tmp_path, env)
    doctor, doctor_out = _doctored(tmp_path, ddp, env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert doctor.returncode == plain.returncode, doctor.stderr[-3000:]
    # the job's lines as without ddpdoctor (ranks interleave freely); ddpdoctor's summary
    # follows them on stdout, its notices on stderr; job.log holds the job's lines alone
    assert all(ln.startswith("JOB|") for ln in plain.stdout.splitlines()), plain.stdout
    assert _job_lines(doctor.stdout) == _job_lines(plain.stdout)
    assert _job_lines(doctor.stderr) == _job_lines(plain.stderr)
    logged = (tmp_path / "run" / "job.log").read_text()
    assert _job_lines(logged) == sorted(_job_lines(plain.stdout) + _job_lines(plain.stderr))
    assert "Traceback" not in doctor.stderr, doctor.stderr[-3000:]
    for mine, theirs in zip(_params(doctor_out), _params(plain_out)):
        if ddp == "torch":
            np.testing.assert_array_equal(mine, theirs)  # the same reduction, bit for bit
        else:  # another summation order: float tolerance (the contract's)
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_exit_status_is_the_jobs_own(tmp_path):
    env = {"MODE": "exit_code", "STEPS": "3"}
    plain, _ = _baseline(tmp_path, env)
    doctor, _ = _doctored(tmp_path, "torch", env)
    assert plain.returncode != 0
    assert doctor.returncode == plain.returncode, doctor.stderr[-3000:]
    assert _job_lines(doctor.stdout) == _job_lines(plain.stdout)
