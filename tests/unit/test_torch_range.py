"""launch.torch_range: the supported torch releases, one source for the notice and for
pyproject.toml's requirement."""

from __future__ import annotations

import re

from ddpdoctor.launch.torch_range import NEWEST, OLDEST, minor_of, supported, torch_notice
from tests.conftest import REPO


def test_pyproject_requires_the_supported_range():
    text = (REPO / "pyproject.toml").read_text()
    low, high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', text).groups()  # type: ignore[union-attr]
    assert minor_of(low) == OLDEST
    assert minor_of(high) == (NEWEST[0], NEWEST[1] + 1)
    doc = (REPO / "docs" / "torch-versions.md").read_text()
    assert f"{OLDEST[0]}.{OLDEST[1]}" in doc and f"{NEWEST[0]}.{NEWEST[1]}" in doc


def test_versions_inside_and_outside():
    assert supported("2.11.0") and supported("2.15.0+cu132") and supported("2.13.0+cpu")
    assert not supported("2.10.0") and not supported("2.16.0.dev20261101")
    assert supported("unknown")  # unreadable: no notice


def test_one_notice_outside_the_range_none_inside():
    assert torch_notice("2.13.0") is None
    said = torch_notice("2.16.0")
    assert said is not None and "2.16.0" in said and "2.11 to 2.15" in said
