"""`ddpdoctor repro`: the command's entry point (to be built)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.errors import UserError


def run_repro(run_dir: Path, output: Path | None) -> int:
    """Write the repro script of ``run_dir``; returns the exit status."""
    raise UserError("repro is not built yet", 2)
