"""`ddpdoctor lint` as a user runs it: exit codes, the JSON schema, bad input as one line, and
`ddpdoctor run` printing lint notices before a job it still runs (the report keeps them)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from tests.conftest import REPO

BUGS = REPO / "sample_bugs"
FIELDS = {"kind", "severity", "file", "line", "collective", "condition", "message", "fix"}


def one_line_error(run) -> str:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ddpdoctor: "), run.stderr
    return lines[0]


def test_clean_file_exits_0(doctor):
    run = doctor(["lint", str(BUGS / "barrier_in_rank0_checkpoint_fixed.py")])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 errors, 0 warnings" in run.stdout


def test_warnings_alone_exit_0(doctor):
    run = doctor(["lint", str(BUGS / "no_set_epoch.py")])
    assert run.returncode == 0, run.stdout
    assert "warning missing_set_epoch" in run.stdout and "fix: call sampler.set_epoch" in run.stdout


def test_error_exits_1_with_text(doctor):
    run = doctor(["lint", str(BUGS / "barrier_in_rank0_checkpoint.py")])
    assert run.returncode == 1
    assert "barrier_in_rank0_checkpoint.py:60: error rank_dependent_collective" in run.stdout
    assert "condition: " in run.stdout and "if rank == 0:" in run.stdout


def test_json_schema(doctor, tmp_path):
    for name in ("metric_rank0_only.py", "no_set_epoch.py", "p2p_recv_recv.py"):
        shutil.copy(BUGS / name, tmp_path / name)
    run = doctor(["lint", "--format", "json", str(tmp_path)])
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema"] == "ddpdoctor.lint/1"
    kinds = set()
    for f in doc["findings"]:
        assert set(f) == FIELDS
        assert f["severity"] in ("error", "warning", "info")
        assert isinstance(f["line"], int) and isinstance(f["collective"], str)
        assert Path(f["file"]).name in ("metric_rank0_only.py", "no_set_epoch.py",
                                        "p2p_recv_recv.py")
        if f["condition"] is not None:
            assert set(f["condition"]) == {"file", "line", "source"}
        kinds.add((Path(f["file"]).name, f["line"], f["kind"]))
    assert ("metric_rank0_only.py", 48, "rank_dependent_collective") in kinds
    assert ("no_set_epoch.py", 32, "missing_set_epoch") in kinds
    assert ("p2p_recv_recv.py", 25, "recv_before_send") in kinds
    cond = next(f["condition"] for f in doc["findings"] if f["line"] == 48)
    assert cond["line"] == 46 and cond["source"] == "if rank == 0:"


def test_ignore_comment(doctor, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import torch.distributed as dist
        rank = dist.get_rank()
        if rank == 0:
            dist.barrier()  # ddpdoctor: ignore[rank_dependent_collective]
        """))
    run = doctor(["lint", str(script)])
    assert run.returncode == 0, run.stdout


def test_missing_path_is_one_line(doctor):
    assert "nosuch.py" in one_line_error(doctor(["lint", "nosuch.py"]))


def test_not_python_is_one_line(doctor, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("this is not python: it has words, and a colon\n")
    assert "notes.txt is not a Python file" in one_line_error(doctor(["lint", str(notes)]))
    words = tmp_path / "words.txt"
    words.write_text("hello\n")  # parses as Python, but is not a Python file
    assert "words.txt is not a Python file" in one_line_error(doctor(["lint", str(words)]))
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    assert "program is not a Python file" in one_line_error(doctor(["lint", str(program)]))


def test_script_without_suffix_is_linted_by_its_shebang(doctor, tmp_path):
    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python3\nimport torch.distributed as dist\n"
                      "if dist.get_rank() == 0:\n    dist.barrier()\n")
    run = doctor(["lint", str(script)])
    assert run.returncode == 1, run.stderr
    assert "train:4: error rank_dependent_collective" in run.stdout


def test_syntax_error_is_one_finding(doctor, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n    pass\n")
    run = doctor(["lint", str(bad)])
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "bad.py:1: error syntax_error: not valid Python" in run.stdout


def test_no_path_is_a_usage_error(doctor):
    run = doctor(["lint"])
    assert run.returncode == 2 and "Traceback" not in run.stderr


JOB = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if os.environ.get("NEVER_SET_IN_THIS_TEST") and rank == 0:
    dist.barrier()
dist.destroy_process_group()
"""


def test_run_prints_lint_notices_and_keeps_them_in_the_report(doctor, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    run = doctor(["run", "--hang-timeout", "30", "--nproc-per-node", "2", str(script)])
    assert run.returncode == 0, run.stderr  # lint never stops the job
    assert "lint notice" in run.stderr and "rank_dependent_collective" in run.stderr
    lint = run.report["lint"]
    assert [(f["line"], f["kind"], f["severity"]) for f in lint] == \
        [(10, "rank_dependent_collective", "error")]
    assert run.report["outcome"] == "completed"
    assert not [f for f in run.report["findings"] if f["severity"] == "error"]


def test_run_of_a_clean_script_has_an_empty_lint(doctor, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB.replace('os.environ.get("NEVER_SET_IN_THIS_TEST") and rank == 0',
                                  "False"))
    run = doctor(["run", "--hang-timeout", "30", "--nproc-per-node", "2", str(script)])
    assert run.returncode == 0, run.stderr
    assert "lint notice" not in run.stderr
    assert run.report["lint"] == []


def test_directory_without_python_is_one_line(doctor, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("no code here\n")
    assert "holds no Python files" in one_line_error(doctor(["lint", str(empty)]))


def test_empty_and_comment_only_files_are_clean(doctor, tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("# nothing but a comment\n")
    run = doctor(["lint", str(tmp_path)])
    assert run.returncode == 0 and "0 errors, 0 warnings" in run.stdout


def test_a_file_named_twice_is_linted_once(doctor, tmp_path):
    shutil.copy(BUGS / "metric_rank0_only.py", tmp_path / "job.py")  # the doctor runs in tmp_path
    run = doctor(["lint", "--format", "json", "job.py", "./job.py", str(tmp_path)])
    assert run.returncode == 1, run.stderr
    found = [(f["file"], f["line"]) for f in json.loads(run.stdout)["findings"]]
    assert found.count(("job.py", 48)) == 1 and len(set(found)) == len(found)


def test_a_device_is_one_line(doctor):
    assert "neither a regular file" in one_line_error(doctor(["lint", "/dev/null"]))
