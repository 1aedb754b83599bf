"""`ddpdoctor lint`: the command's entry point (to be built)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.errors import UserError


def run_lint(paths: list[Path], fmt: str) -> int:
    """Lint ``paths`` and print the findings in ``fmt``; returns the exit status."""
    raise UserError("lint is not built yet", 2)
