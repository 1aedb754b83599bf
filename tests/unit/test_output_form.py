"""What a user reads in a log or CI (#56): off a terminal the summary is never hard-wrapped
(a path never split, a table never cut), `--quiet` is the verdict line and the report's
path, `--json` the report alone; a finding's box says each sentence once; a run dir used
again is cleared of the earlier run; the job's output is tee'd into job.log whatever
becomes of ddpdoctor's own output.  The reports are real ones (tests/fixtures/reports)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor.errors import UserError
from ddpdoctor.proc.job_output import _Copier
from ddpdoctor.report.console import (finding_body, said_once, show_report,
                                      summary_console)
from ddpdoctor.rundir.layout import clear_earlier_run, make_run_dir
from ddpdoctor.rundir.safe_path import CheckedDir

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "reports"
NAMES = ("barrier_in_rank0_checkpoint", "early_stop_per_rank", "train_hang")
LONG = Path("/runs/" + "a-very-long-folder-name-" * 6 + "x/report.json")


def load(name: str) -> dict:
    return json.loads((REPORTS / f"{name}.json").read_text())


def printed(report: dict, console: Console, path: Path = LONG, shown: str = "summary") -> str:
    show_report(report, path, console, shown)
    return console.file.getvalue()


def plain() -> Console:
    """What summary_console gives off a terminal with no COLUMNS."""
    return Console(file=io.StringIO(), soft_wrap=True, color_system=None)


def test_summary_console_off_a_terminal_never_wraps(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert summary_console(file=io.StringIO()).soft_wrap
    monkeypatch.setenv("COLUMNS", "80")  # a width the user gave: boxes at that width
    assert not summary_console(file=io.StringIO()).soft_wrap


@pytest.mark.parametrize("name", NAMES)
def test_the_plain_layout_splits_no_path_and_cuts_no_cell(name):
    report = load(name)
    text = printed(report, plain())
    lines = text.splitlines()
    assert f"Report: {LONG}" in lines  # whole, on a line of its own
    assert "…" not in text and "╭" not in text and "│" not in text
    for f in report["findings"]:  # each finding's summary on one line, whole
        assert " ".join(f["summary"].split()) in [ln.strip() for ln in lines], f["summary"]
    for r in report["ranks"]:
        site = (r.get("current") or {}).get("callsite")
        if site:
            assert any(ln.startswith(str(r["rank"]) + " ") and ln.rstrip().endswith(site)
                       for ln in lines), site


@pytest.mark.parametrize("name", NAMES)
def test_boxes_on_a_terminal_keep_the_report_path_whole(name):
    console = Console(file=io.StringIO(), width=80, color_system=None)
    text = printed(load(name), console)
    assert "╭" in text and f"Report: {LONG}" in text.splitlines()


def test_json_is_the_report_alone():
    report = load("train_hang")
    assert json.loads(printed(report, plain(), shown="json")) == report


def test_quiet_is_the_verdict_line_and_the_path():
    report = load("train_hang")
    lines = printed(report, plain(), shown="quiet").splitlines()
    assert len(lines) == 2 and lines[1] == f"Report: {LONG}"
    first = report["findings"][0]
    assert lines[0].startswith(f"ddpdoctor: {report['outcome']} ({report['world_size']} "
                               f"ranks): error {first['kind']}: ")
    assert " ".join(first["summary"].split()) in lines[0]


def sentences(text: str) -> list[str]:
    return [" ".join(s.lower().rstrip(".").split()) for line in text.splitlines()
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`])|;\s+", line.strip()) if s.strip()]


@pytest.mark.parametrize("name", NAMES)
def test_a_box_says_each_sentence_once(name):
    for f in load(name)["findings"]:
        said = sentences(finding_body(f).plain)
        assert len(said) == len(set(said)), f["kind"]


def test_a_detail_that_repeats_the_summary_loses_the_repeat_only():
    summary = "rank 1 skipped iteration 3: it drew the batch; the skip is `continue` at a.py:4"
    detail = ("Rank 1 skipped iteration 3: it drew the batch.\n"
              "From then on its calls met a later iteration:\n"
              "the skip is `continue` at a.py:4.\n"
              "Collective #9 does not match (op differs):\n"
              "  rank 0: all_reduce at a.py:9\n"
              "By then, synced backward passes: rank 0: 8, rank 1: 7.")
    kept = said_once(detail, (summary, "Fix: decide together."))
    assert kept.splitlines() == [
        "From then on its calls met a later iteration.",  # what it introduced was said
        "Collective #9 does not match (op differs):",
        "  rank 0: all_reduce at a.py:9",
        "By then, synced backward passes: rank 0: 8, rank 1: 7."]


def test_a_run_dir_used_again_keeps_nothing_of_the_earlier_run(tmp_path):
    run = make_run_dir(tmp_path / "run", "id")
    (run / "run.json").write_text("{}")
    (run / "traces" / "pid-7.ring").write_bytes(b"x")
    (run / "attempt-0").mkdir()
    for name in ("report.json", "supervisor.jsonl", "live.json", "job.log"):
        (run / name).write_text("earlier")
    (run / "notes.txt").write_text("the user's")
    os.symlink(tmp_path / "elsewhere", run / "stacks-link")
    again = make_run_dir(tmp_path / "run", "id2")
    assert sorted(p.name for p in again.iterdir()) == ["notes.txt", "stacks", "stacks-link",
                                                       "traces"]
    assert not list((again / "traces").iterdir())


def test_a_folder_that_is_no_run_dir_is_left_as_it_is(tmp_path):
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "mine" / "report.json").write_text("the user's own")
    with CheckedDir(tmp_path / "mine") as top:
        assert clear_earlier_run(top) == []
    assert (tmp_path / "mine" / "report.json").read_text() == "the user's own"


def test_a_run_dir_a_running_ddpdoctor_holds_is_refused(tmp_path):
    run = make_run_dir(tmp_path / "run", "id")
    (run / "run.json").write_text("{}")
    held = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_SH)  # as runs.hold_live holds a live run
        with pytest.raises(UserError, match="in use by a running ddpdoctor"):
            make_run_dir(tmp_path / "run", "id2")
    finally:
        os.close(held)
    assert (run / "run.json").exists()


def test_the_job_output_reaches_the_log_after_its_reader_went(tmp_path):
    source_r, source_w = os.pipe()
    read_end, write_end = os.pipe()
    log = os.open(tmp_path / "job.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    copier = _Copier(log)
    thread = threading.Thread(target=copier.copy, args=(source_r, write_end))
    thread.start()
    os.write(source_w, b"first\n")
    assert os.read(read_end, 100) == b"first\n"
    os.close(read_end)  # `| head` exited: the copy goes on into the log
    os.write(source_w, b"second\n")
    copier.muted = True
    os.write(source_w, b"a traceback\n")
    os.close(source_w)
    thread.join(10)
    assert not thread.is_alive()
    assert (tmp_path / "job.log").read_bytes() == b"first\nsecond\na traceback\n"
    for fd in (source_r, write_end, log):
        os.close(fd)


def test_the_copier_outlives_a_supervisor_that_is_killed(tmp_path):
    """A job's output keeps its reader when the process that started the copier dies."""
    log = tmp_path / "job.log"
    starter = subprocess.run([sys.executable, "-c", (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from ddpdoctor.proc.job_output import JobOutput\n"
        f"out = JobOutput(open({str(log)!r}, 'ab', buffering=0), Path({str(log)!r}))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"  # the job, writing after its starter is gone
        "    os.dup2(out.stdout, 1); out.started(); time.sleep(1)\n"
        "    os.write(1, b'still shown\\n'); os._exit(0)\n"
        "out.started(); os.kill(os.getpid(), 9)\n")],
        capture_output=True, timeout=60)
    assert starter.returncode == -9
    assert starter.stdout == b"still shown\n"  # the copier held our stdout till the end
    assert log.read_bytes() == b"still shown\n"


@pytest.mark.parametrize("shown", ["summary", "json"])
def test_a_summary_whose_reader_went_falls_silent(shown):
    """`ddpdoctor analyze ... | head -1`: the rest is not read, the status stays the
    command's (rich's own console would exit 1, which analyze means as an error found)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w")
    console = summary_console(stream)
    show_report(load("train_hang"), LONG, console, shown)
    assert console.quiet
    try:
        stream.close()
    except BrokenPipeError:
        pass  # what was left in its buffer: nowhere to go (cli.main silences that flush)


@pytest.mark.parametrize("columns", [None, "80"])
def test_off_a_terminal_no_line_ends_in_padding(monkeypatch, columns):
    """A table's rows (the ranks, `bugs list`, `bugs show`) end where their text does, in a
    log as with a width the user gave."""
    from ddpdoctor.bugs import list_bugs, show_bug

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    for name in NAMES:
        text = printed(load(name), summary_console(file=io.StringIO()))
        assert "rank  state" in text
        assert [line for line in text.splitlines() if line != line.rstrip()] == [], name
    if columns is not None:
        return  # rich wraps `bugs list`'s last sentence at that width, a space at the break
    console = summary_console(file=io.StringIO())
    list_bugs(console)
    show_bug("early_stop_per_rank", console)
    text = console.file.getvalue()
    assert "metric_rank0_only" in text and "symptom" in text
    assert [line for line in text.splitlines() if line != line.rstrip()] == []
