"""Fixtures of the robustness tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import kill_leftovers


@pytest.fixture
def run_dir(tmp_path: Path):
    """A run dir path; whatever the test leaves running under it is killed afterwards."""
    path = tmp_path / "run"
    yield path
    kill_leftovers(path)
