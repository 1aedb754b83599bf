"""At 80 columns (a pipe, a log file, a small terminal) the console summary wraps, never cuts:
every rank's file:line in the table and every finding's text in its box are there whole.
The reports are real ones: catalogued bugs and the README's example, run under ddpdoctor."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor.report.console import print_summary, rank_table
from ddpdoctor.report.lint_match import LINT_KEY, lint_note, mark_lint_seen

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "reports"
NAMES = ("barrier_in_rank0_checkpoint", "early_stop_per_rank", "train_hang")


def load(name: str) -> dict:
    return json.loads((REPORTS / f"{name}.json").read_text())


def render(renderable_or_report, width: int = 80) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    if isinstance(renderable_or_report, dict):
        print_summary(renderable_or_report, Path("/runs/x/report.json"), console)
    else:
        console.print(renderable_or_report)
    return out.getvalue()


def column_cells(text: str, header: str) -> list[str]:
    """Each row's cell of the column titled ``header``, its folded lines joined."""
    lines = text.splitlines()
    start = re.search(rf"(?<=\s){header}(\s|$)", lines[0]).start()
    rows: list[str] = []
    for line in lines[1:]:
        if line[:4].strip():
            rows.append("")
        rows[-1] += line[start:].strip()
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_table_keeps_every_file_line_whole(name):
    report = load(name)
    text = render(rank_table(report))
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    sites = [(r.get("current") or {}).get("callsite", "") for r in report["ranks"]]
    assert any(sites) and column_cells(text, "at") == sites


@pytest.mark.parametrize("name", NAMES)
def test_finding_boxes_wrap_their_whole_text(name):
    report = load(name)
    text = render(report)
    squashed = re.sub(r"[\s│╭╮╰╯─]", "", text)
    for finding in report["findings"][:8]:
        assert re.sub(r"\s", "", finding["summary"]) in squashed
        assert re.sub(r"\s", "", finding["fix"]) in squashed
    assert "…" not in text.replace("… and", "")


def test_findings_are_numbered_from_one_and_a_consequence_points_at_its_root():
    report = load("train_hang")
    root = report["findings"][0]
    consequence = {**copy.deepcopy(root), "severity": "info", "caused_by": 0,
                   "summary": "rank 1 failed waiting"}
    report["findings"] = [root, consequence]
    text = render(report, width=120)
    assert "finding 1, error: collective_mismatch" in text
    assert "finding 2, info: collective_mismatch" in text
    assert "(a consequence of finding 1)" in text and "finding 0" not in text


@pytest.mark.parametrize("name, site", [("train_hang", "train_hang.py:37"),
                                        ("barrier_in_rank0_checkpoint",
                                         "barrier_in_rank0_checkpoint.py:60"),
                                        ("early_stop_per_rank", "early_stop_per_rank.py:50")])
def test_lint_before_the_run_is_said_in_the_box(name, site):
    report = load(name)
    for finding in report["findings"]:
        finding["evidence"].pop(LINT_KEY, None)
    mark_lint_seen(report["findings"], report["lint"])  # what the report's build does
    root = report["findings"][0]
    assert lint_note(root).startswith(f"lint saw this at {site} before the run")
    squashed = re.sub(r"[\s│]", "", render(report))
    assert re.sub(r"\s", "", f"Lint saw this at {site} before the run") in squashed


def test_lint_saw_nothing_says_nothing():
    report = load("train_hang")
    for finding in report["findings"]:
        finding["evidence"].pop(LINT_KEY, None)
    lint = [dict(f, line=f["line"] + 100) for f in report["lint"]]
    mark_lint_seen(report["findings"], lint)
    assert all(lint_note(f) is None for f in report["findings"])
    assert "lint saw" not in render(report).lower()


def test_a_report_read_back_says_what_lint_saw(tmp_path):
    from ddpdoctor.report.load import load_report

    report = load("barrier_in_rank0_checkpoint")
    for finding in report["findings"]:
        finding["evidence"].pop(LINT_KEY, None)  # as written before findings said so
    (tmp_path / "report.json").write_text(json.dumps(report))
    again = load_report(tmp_path / "report.json")
    assert lint_note(again["findings"][0]).startswith(
        "lint saw this at barrier_in_rank0_checkpoint.py:60 before the run")
