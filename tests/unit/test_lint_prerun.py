"""`ddpdoctor run` finds the job's script to lint in each form of the command, and a report
finds the lint findings kept in its run dir (or the run dir above an attempt's)."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.lint.prerun import job_script
from ddpdoctor.rundir.lint_results import read_lint_results as read_lint


@pytest.mark.parametrize("command", [
    ["train.py", "--lr", "0.1"],
    ["torchrun", "--nproc-per-node", "2", "train.py", "--epochs", "3"],
    ["python", "train.py"],
    ["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
])
def test_script_found_in_every_form(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert job_script(command) is not None and job_script(command).name == "train.py"


def test_a_launcher_that_declares_itself_is_skipped_for_its_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "launch.py").write_text("# ddpdoctor: launcher\nimport sys\n")
    (tmp_path / "plain.py").write_text("import sys\n")
    assert job_script(["python", "launch.py", "--nproc-per-node", "2", "train.py"]).name \
        == "train.py"
    assert job_script(["python", "plain.py", "train.py"]).name == "plain.py"


@pytest.mark.parametrize("command", [
    ["python", "-m", "mypackage.train"], ["python", "-c", "print(1)"], ["torchrun", "gone.py"],
])
def test_no_script_to_lint(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    assert job_script(command) is None


def test_read_lint_from_run_dir_and_attempts(tmp_path):
    assert read_lint(tmp_path) is None
    (tmp_path / "lint.json").write_text(json.dumps([{"kind": "x", "line": 3}]))
    attempt = tmp_path / "attempt-1"
    attempt.mkdir()
    assert read_lint(tmp_path) == [{"kind": "x", "line": 3}]
    assert read_lint(attempt) == [{"kind": "x", "line": 3}]
    (tmp_path / "lint.json").write_text("{broken")
    assert read_lint(tmp_path) is None


def test_notices_are_a_count_the_first_few_errors_first_and_a_pointer(tmp_path):
    import io

    from rich.console import Console

    from ddpdoctor.lint.prerun import SHOWN, lint_before_run

    script = tmp_path / "train.py"
    lines = ["import os", "import torch.distributed as dist", "rank = dist.get_rank()",
             *[f"if os.path.exists('flag{i}'):\n    dist.barrier()" for i in range(4)],
             "if rank == 0:", "    dist.barrier()"]
    script.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    findings = lint_before_run(["torchrun", str(script)], tmp_path, Console(file=out, width=400))
    text = out.getvalue().splitlines()
    errors = [f for f in findings if f["severity"] == "error"]
    assert len(findings) > SHOWN and len(errors) == 1
    assert text[0] == f"ddpdoctor: lint: 1 error, {len(findings) - 1} warnings (the job starts " \
        "anyway)"
    notices = [t for t in text if "lint notice" in t]
    assert len(notices) == SHOWN and ":13: error rank_dependent_collective" in notices[0]
    assert text[-1] == f"ddpdoctor: lint: {len(findings) - SHOWN} more; the fixes: " \
        f"`ddpdoctor lint {script}`"
    assert json.loads((tmp_path / "lint.json").read_text()) == findings
