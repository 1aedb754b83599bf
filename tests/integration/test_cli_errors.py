"""Bad input to the command line: one clear line on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import JOBS


def one_line_error(run, code: int = 2) -> str:
    assert run.returncode == code, run.stderr
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("ddpdoctor: ")
    return lines[0]


def test_missing_script(doctor):
    line = one_line_error(doctor(["run", "--nproc-per-node", "2", "nosuch.py"]))
    assert "script not found: nosuch.py" in line


def test_missing_script_after_python(doctor):
    line = one_line_error(doctor(["run", "--", sys.executable, "nosuch.py"]))
    assert "nosuch.py" in line


def test_missing_command(doctor):
    assert "command not found" in one_line_error(doctor(["run", "--", "no-such-binary-xyz"]))


def test_no_command(doctor):
    assert "no command" in one_line_error(doctor(["run", "--hang-timeout", "5"]))


def test_unknown_flag(doctor):
    line = one_line_error(doctor(["run", "--bogus", "train.py"]))
    assert "--bogus" in line


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_bad_hang_timeout(doctor, value):
    assert "--hang-timeout" in one_line_error(
        doctor(["run", "--hang-timeout", value, "--nproc-per-node", "2", "x.py"]))


def test_unwritable_run_dir(doctor, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_line_error(doctor(["run", "--run-dir", str(blocker / "sub"),
                                  "--nproc-per-node", "1", str(JOBS / "collectives.py")]))
    assert "cannot write the run dir" in line


def test_unknown_command(doctor):
    one_line_error(doctor(["frobnicate"]))


def test_analyze_missing_dir(doctor, tmp_path):
    assert "no such run dir" in one_line_error(doctor(["analyze", str(tmp_path / "nope")]))


def test_analyze_not_a_run_dir(doctor, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "not a ddpdoctor run dir" in one_line_error(
        doctor(["analyze", str(tmp_path / "empty")]))


def test_analyze_corrupt_run_dir(doctor, tmp_path):
    traces = tmp_path / "bad" / "traces"
    traces.mkdir(parents=True)
    (traces / "pid-1.ring").write_bytes(b"\x00garbage" * 100)
    line = one_line_error(doctor(["analyze", str(tmp_path / "bad")]))
    assert "no readable rank trace" in line and "pid-1.ring" in line


@pytest.mark.slow
def test_script_without_torch_distributed_runs_normally(doctor):
    run = doctor(["run", "--", sys.executable, str(JOBS / "no_distributed.py")])
    assert run.returncode == 0, run.stderr
    assert "sum 6" in run.stdout and "to stderr" in run.stderr
    report = run.report
    assert report["outcome"] == "completed" and report["ranks"] == []
    assert any("no torch.distributed activity" in n for n in report["notes"])
    assert "No torch.distributed activity was recorded" in run.stdout  # the summary's
