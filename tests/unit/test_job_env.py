"""The job's environment under `ddpdoctor run`: the flight recorder on, the user's size kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.config import RunConfig
from ddpdoctor.launch.command import job_env
from ddpdoctor.trace import fr_files


@pytest.mark.parametrize("user,expected", [
    ({}, fr_files.DEFAULT_BUFFER_SIZE),
    ({"TORCH_FR_BUFFER_SIZE": "5"}, "5"),
    # torch reads TORCH_FR_BUFFER_SIZE over the older name: setting it would override theirs
    ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, None),
])
def test_flight_recorder_size_is_the_users_when_they_set_one(monkeypatch, tmp_path: Path,
                                                               user: dict, expected) -> None:
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in user.items():
        monkeypatch.setenv(name, value)
    env = job_env(tmp_path, "run1", RunConfig(command=("train.py",)))
    assert env.get("TORCH_FR_BUFFER_SIZE") == expected
    assert env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") == user.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    assert env["DDPDOCTOR_RUN_DIR"] == str(tmp_path)
