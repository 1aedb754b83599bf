"""Fuzz report.json's readers and writers to a terminal: the bytes of a hostile report.json.

    nice -n 10 python bench/fuzz/fuzz_report.py bench/fuzz/corpus/report -max_total_time=600

The bytes go through ``load_report``'s parsing (bounded JSON, then the schema's checks), then
to the console's summary (written by the terminal-safe console, into memory) and to the
UI's model.  A refusal is a UserError (one line); nothing else may be raised, and the
console's output holds no escape sequence or C1 control: the report cannot write to the
terminal.
"""

from __future__ import annotations

import io
from pathlib import Path

import atheris

import common  # noqa: F401 - puts the repository on sys.path

with atheris.instrument_imports(include=["ddpdoctor"]):
    from ddpdoctor.errors import UserError
    from ddpdoctor.report.console import print_summary
    from ddpdoctor.report.load import validate
    from ddpdoctor.rundir.bounded import BadInput, load_json
    from ddpdoctor.terminal_text import SafeConsole
    from ddpdoctor.tui.model import ReportView

PATH = Path("report.json")


def one_input(data: bytes) -> None:
    try:
        report = validate(load_json(data, PATH), PATH)
    except (BadInput, UserError) as e:
        assert "\n" not in str(e), str(e)
        return
    out = io.StringIO()
    console = SafeConsole(file=out, width=100, color_system=None, force_terminal=False)
    print_summary(report, PATH, console)
    text = out.getvalue()
    assert "\x1b" not in text and not common.CONTROL.search(text.replace("\r", "")), \
        repr(text[:200])
    view = ReportView.from_dict(report)
    common.assert_safe_text([view.outcome, view.command, view.problems, view.run_dir])
    for f in view.findings:
        common.assert_safe_text([f.kind, f.summary])


if __name__ == "__main__":
    atheris.Setup(common.argv(), one_input)
    atheris.Fuzz()
