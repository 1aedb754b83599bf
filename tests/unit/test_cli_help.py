"""Every command's --help has a description, an example and an "Exit status" line; `ui`
lists its keys; `analyze` mentions flight recorder dumps and takes a report.json as `ui`
does; the diagnosing commands share one exit rule (0 no error finding, 1 one, 2 bad input);
`bugs list` is one line a bug, `bugs show NAME` one bug in full."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest

from ddpdoctor.catalogue import CATALOGUE
from ddpdoctor.cli import build_parser, main
from ddpdoctor.tui.keys import KEYS

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "reports"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def every_command() -> list[tuple[str, ...]]:
    found = []
    for name, parser in subcommands(build_parser()).items():
        found.append((name,))
        if name == "bugs":
            found += [(name, sub) for sub in subcommands(parser)]
    return found


def help_of(*words: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    assert done.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("words", every_command(), ids=" ".join)
def test_help_has_description_example_and_exit_status(words):
    text = help_of(*words)
    assert "Exit status:" in text
    assert "example" in text  # "examples:" or "example:"
    usage_end = text.index("\n\n")
    assert text[usage_end:].strip().split("\n")[0].strip(), "a description after the usage"


def test_ui_help_lists_every_key(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = help_of("ui")
    joined = " ".join(text.split())
    for key, meaning in KEYS:
        assert key in text and " ".join(meaning.split()) in joined
    assert all(len(line) <= 80 for line in text.splitlines())  # wrapped, as in a pipe


def test_analyze_help_mentions_flight_recorder_dumps_and_report_json():
    text = " ".join(help_of("analyze").split())
    assert "flight recorder dumps" in text and "report.json" in text


def test_the_bugs_list_is_one_line_a_bug_grouped_by_kind():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["bugs", "list"]) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) < len(CATALOGUE) + 15
    for bug in CATALOGUE:
        assert sum(bug.name in line for line in lines) == 1, bug.name
    assert any(line.startswith("collective_mismatch (") for line in lines)


def test_bugs_show_and_an_unknown_name(capsys):
    assert main(["bugs", "show", "early_stop_per_rank"]) == 0
    shown = capsys.readouterr().out
    assert "missing_collective, blaming rank 1" in shown and "Lightning-AI" in shown
    assert main(["bugs", "show", "metric_on_rank0_only"]) == 2
    assert "did you mean metric_rank0_only" in capsys.readouterr().err


def diagnose(*argv: str) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        return main(list(argv))


def test_analyze_takes_a_report_json_and_exits_by_the_one_rule(tmp_path):
    hung = REPORTS / "train_hang.json"
    assert diagnose("analyze", str(hung)) == 1  # an error finding
    clean = json.loads(hung.read_text())
    clean["findings"] = [dict(f, severity="warning") for f in clean["findings"]]
    (tmp_path / "clean.json").write_text(json.dumps(clean))
    assert diagnose("analyze", str(tmp_path / "clean.json")) == 0
    (tmp_path / "bad.json").write_text("{not json")
    assert diagnose("analyze", str(tmp_path / "bad.json")) == 2
    assert diagnose("analyze", str(tmp_path / "missing")) == 2
    assert diagnose("analyze", str(hung), str(tmp_path)) == 2  # a report does not merge


def test_analyze_json_of_a_report_prints_it(capsys):
    assert main(["analyze", str(REPORTS / "early_stop_per_rank.json"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["schema"] == "ddpdoctor.report/1"


def test_bugs_list_verbose_is_every_bug_in_full(capsys):
    assert main(["bugs", "list", "-v"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("\nsource ") + shown.startswith("source ") == len(CATALOGUE)
    assert all(bug.name in shown for bug in CATALOGUE)
