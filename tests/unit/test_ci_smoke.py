"""The smoke run of .ci/run names cases that exist: catalogued bugs, scripts in the checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.conftest import REPO


def _smoke():
    spec = importlib.util.spec_from_file_location("ci_smoke", REPO / ".ci" / "smoke.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["ci_smoke"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_every_case_names_a_catalogued_bug_or_a_script(tmp_path: Path):
    smoke = _smoke()
    cases = smoke.cases(smoke.HANDFUL, tmp_path)  # find_bug raises on an unknown name
    assert len(cases) == 2 * len(smoke.HANDFUL) + 3
    for case in cases:
        scripts = [a for a in case.args if a.endswith(".py")]
        assert all((REPO / s).is_file() for s in scripts), case


def test_checks_tell_a_right_run_from_a_wrong_one():
    smoke = _smoke()
    hung = {"outcome": "hung", "findings": [
        {"kind": "collective_mismatch", "severity": "error", "ranks": [0]}]}
    assert smoke.expect_finding("collective_mismatch", (0,), 124)(124, hung) == ""
    assert smoke.expect_finding("collective_mismatch", (1,), 124)(124, hung) != ""
    assert smoke.expect_clean(124, hung) != ""
    assert smoke.expect_clean(0, {"outcome": "completed", "findings": []}) == ""
