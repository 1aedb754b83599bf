"""`ddpdoctor repro`: write the standalone replay script of a run dir."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.layout import write_bytes_atomic
from ddpdoctor.repro.emit import script_text
from ddpdoctor.repro.header import replay_command
from ddpdoctor.repro.facts import ReplayJob, read_job
from ddpdoctor.terminal_text import say

DEFAULT_NAME = "repro.py"


def write_repro(run_dir: Path, output: Path | None = None) -> Path:
    """Write the repro script of ``run_dir`` (default ``RUN_DIR/repro.py``); returns its path.
    Raises UserError (exit 2) for a run dir that cannot be read or holds too little."""
    return _write(read_job(run_dir), output or run_dir / DEFAULT_NAME)


def _write(job: ReplayJob, target: Path) -> Path:
    try:
        write_bytes_atomic(target, script_text(job).replace("THIS_FILE", target.name).encode())
    except OSError as e:
        raise UserError(f"cannot write {target}: {e.strerror or e}; give another -o FILE", 2)
    return target


def run_repro(run_dir: Path, output: Path | None) -> int:
    """Write the repro script of ``run_dir``; returns the exit status."""
    job = read_job(run_dir)
    target = _write(job, output or run_dir / DEFAULT_NAME)
    lines = target.read_text().count("\n")
    say(f"ddpdoctor: wrote {target} ({lines} lines); run it with "
        f"`{replay_command(job, str(target))}`")
    return 0
