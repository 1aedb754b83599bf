"""`ddpdoctor lint`: lint the paths given and print the findings as text or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from ddpdoctor.errors import UserError
from ddpdoctor.lint.engine import lint_files
from ddpdoctor.lint.findings import SCHEMA, LintFinding, Severity
from ddpdoctor.terminal_text import safe

FORMATS = ("text", "json")


def format_text(findings: list[LintFinding], out: TextIO) -> None:
    """One finding a paragraph: ``file:line: severity kind: message``, its condition, its fix."""
    for f in findings:  # file names, messages and source lines: made safe for a terminal
        out.write(safe(f"{f.file}:{f.line}: {f.severity.value} {f.kind}: {f.message}") + "\n")
        if f.condition is not None:
            out.write(safe(f"    condition: {f.condition.file}:{f.condition.line}: "
                           f"{f.condition.source}") + "\n")
        out.write(safe(f"    fix: {f.fix}") + "\n")
    errors = sum(f.severity == Severity.ERROR for f in findings)
    warnings = sum(f.severity == Severity.WARNING for f in findings)
    out.write(f"ddpdoctor lint: {errors} error{'s' * (errors != 1)}, "
              f"{warnings} warning{'s' * (warnings != 1)}\n")


def format_json(findings: list[LintFinding], out: TextIO) -> None:
    json.dump({"schema": SCHEMA, "findings": [f.as_dict() for f in findings]}, out, indent=1)
    out.write("\n")


def run_lint(paths: list[Path], fmt: str) -> int:
    """Lint ``paths`` and print the findings in ``fmt``; returns the exit status
    (0: no error finding, 1: an error finding; bad input raises UserError, exit 2)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}: use text or json", 2)
    if not paths:
        raise UserError("give at least one Python file or directory to lint", 2)
    findings = lint_files([Path(p) for p in paths])
    (format_json if fmt == "json" else format_text)(findings, sys.stdout)
    return 1 if any(f.severity == Severity.ERROR for f in findings) else 0
