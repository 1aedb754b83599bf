"""Lint the job's script before ``ddpdoctor run`` starts it: notices only, never a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ddpdoctor.analysis.load.user_source import declares_launcher
from ddpdoctor.errors import UserError
from ddpdoctor.lint.engine import lint_files
from ddpdoctor.rundir.lint_results import write_lint_results
from ddpdoctor.terminal_text import safe

SHOWN = 3  # notices printed at most (errors first); the report keeps them all
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def job_script(command: list[str]) -> Path | None:
    """The user's script in a ``ddpdoctor run`` command: ``train.py ...``, ``torchrun ...
    train.py``, ``python [-m torch.distributed.run ...] train.py``; None for another
    ``-m module``, ``-c`` or no script."""
    args = iter(command)
    for arg in args:
        if arg in ("-m", "--module"):
            if next(args, "").startswith(LAUNCHER_MODULES):
                continue  # python -m torch.distributed.run ... train.py
            return None
        if arg == "-c":
            return None
        if arg.endswith(".py") and not arg.startswith("-"):
            path = Path(arg)
            if path.is_file() and declares_launcher(str(path)):
                continue  # a launcher of the user's own: its script comes later
            return path if path.is_file() else None
    return None


def lint_before_run(command: list[str], run_dir: Path, console: Console) -> list[dict[str, Any]]:
    """Lint the job's script, print its findings as notices and keep them in the run dir
    (``lint.json``) for the report. Whatever happens here, the run goes on."""
    script = job_script(command)
    if script is None:
        return []
    try:
        findings = [f.as_dict() for f in lint_files([script])]
    except UserError as e:
        console.print(f"[dim]ddpdoctor: lint skipped: {escape(safe(str(e)))}[/dim]",
                      highlight=False)
        return []
    except Exception as e:  # noqa: BLE001 - a bug in the linter must never stop the user's job
        console.print(f"[dim]ddpdoctor: lint skipped ({e.__class__.__name__})[/dim]",
                      highlight=False)
        return []
    write_lint_results(run_dir, findings)  # when it cannot be written, the notices still tell
    if findings:
        _print_notices(findings, script, console)
    return findings


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _print_notices(findings: list[dict[str, Any]], script: Path, console: Console) -> None:
    """A count, the first few findings (errors first), and where to see them all."""
    errors = sum(f["severity"] == "error" for f in findings)
    command = f"`ddpdoctor lint {escape(safe(str(script)))}`"
    console.print(f"[dim]ddpdoctor: lint: {_count(errors, 'error')}, "
                  f"{_count(len(findings) - errors, 'warning')} (the job starts anyway)[/dim]",
                  highlight=False)
    shown = sorted(findings, key=lambda f: f["severity"] != "error")[:SHOWN]
    for f in shown:
        style = "yellow" if f["severity"] == "error" else "dim"
        notice = safe(f"{f['file']}:{f['line']}: {f['severity']} {f['kind']}: {f['message']}")
        console.print(f"[{style}]ddpdoctor: lint notice: {escape(notice)}[/{style}]",
                      highlight=False)
    more = f"{len(findings) - SHOWN} more; " if len(findings) > SHOWN else ""
    console.print(f"[dim]ddpdoctor: lint: {more}the fixes: {command}[/dim]", highlight=False)
