"""Bad input to `ddpdoctor ui`: a clear one-line message on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.tui.app import run_ui
from tui_reports import HANG_4RANKS


def check_rejected(path: Path, capsys: pytest.CaptureFixture[str], *words: str) -> str:
    status = run_ui(path)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert status == 2
    assert err.startswith("ddpdoctor: ") and "\n" not in err, err
    assert "Traceback" not in captured.err + captured.out
    for word in words:
        assert word in err, err
    return err


def test_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_rejected(tmp_path / "nope" / "report.json", capsys, "does not exist")


def test_truncated_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HANG_4RANKS.read_text()
    truncated = tmp_path / "report.json"
    truncated.write_text(text[: len(text) // 2])
    check_rejected(truncated, capsys, str(truncated))


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "report.json"
    empty.write_text("")
    check_rejected(empty, capsys, str(empty))


@pytest.mark.parametrize(
    "content",
    [
        {"name": "my-package", "version": "1.0"},
        {"schema": "ddpdoctor.report/99", "ranks": []},
        [1, 2, 3],
        "just a string",
    ],
    ids=["other-json", "other-schema", "list", "string"],
)
def test_foreign_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object) -> None:
    foreign = tmp_path / "package.json"
    foreign.write_text(json.dumps(content))
    check_rejected(foreign, capsys, str(foreign))


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "pid-1.ring"
    binary.write_bytes(bytes(range(256)) * 4)
    check_rejected(binary, capsys, str(binary))


def test_empty_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_rejected(tmp_path, capsys, str(tmp_path))


def test_dir_that_is_not_a_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    check_rejected(tmp_path, capsys, str(tmp_path))


def test_run_dir_with_a_broken_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "report.json").write_text('{"schema": "ddpdoctor.report/1", "ranks": [')
    check_rejected(tmp_path, capsys, "report.json")


def test_bad_input_in_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    code = "import sys; from pathlib import Path; from ddpdoctor.tui.app import run_ui; sys.exit(run_ui(Path(sys.argv[1])))"
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("ddpdoctor: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
