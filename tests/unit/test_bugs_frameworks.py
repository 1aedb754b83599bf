"""bugs run of a framework bug without its framework: one line that says what to install."""

from __future__ import annotations

import pytest

from ddpdoctor import bugs
from ddpdoctor.errors import UserError


def test_a_missing_framework_is_one_line_with_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(bugs.FRAMEWORKS, "no_such_framework_here", "no-such-framework")
    script = tmp_path / "job.py"
    script.write_text("import torch\nfrom no_such_framework_here.trainer import Trainer\n")
    with pytest.raises(UserError) as caught:
        bugs._check_framework(bugs.CATALOGUE[0], script)
    assert "pip install no-such-framework" in str(caught.value)
    script.write_text("import torch\nfrom .local import x\n")
    bugs._check_framework(bugs.CATALOGUE[0], script)  # nothing missing: no error


def test_every_framework_bug_names_its_framework():
    where = bugs.sample_bugs_dir()
    for bug in bugs.CATALOGUE:
        top = bug.name.split("_")[0]
        if top in bugs.FRAMEWORKS:
            assert f"import {top}" in (where / bug.script).read_text() or \
                f"from {top}" in (where / bug.script).read_text(), bug.name
