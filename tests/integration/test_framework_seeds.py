"""seed_collision under a framework that seeds every rank alike on purpose: a healthy
transformers Trainer job (2 ranks, a tiny model from a config) gets no warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import JOBS, run_doctor, warmed

pytestmark = pytest.mark.slow


def test_a_healthy_trainer_run_gets_no_seed_collision_warning(tmp_path: Path) -> None:
    run = run_doctor(warmed(["run", "--ddp", "torch", "--nproc-per-node", "2",
                             str(JOBS / "hf_trainer.py"), str(tmp_path / "out")]), tmp_path,
                     env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, timeout=500)
    report = run.report
    assert report["outcome"] == "completed" and run.returncode == 0, run.stderr[-3000:]
    found = run.findings("seed_collision")
    assert not [f for f in found if f["severity"] != "info"], found
    # the probes saw the Trainer and its dropout: the collision is there, told as by design
    assert found and found[0]["evidence"]["framework"] == "transformers"
    assert "data_generators" not in found[0]["evidence"]
    assert "data_seed" in found[0]["fix"]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
