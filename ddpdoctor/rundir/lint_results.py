"""The run dir's lint file: what `ddpdoctor run` linted in the job's script before the start.

lint/prerun.py writes it; report/ reads it back (and launch/ reaches it) through here only, so
the run dir's layout stays in rundir/ and no layer below lint imports the linter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.rundir.bounded import BadInput, load_json, read_file
from ddpdoctor.rundir.layout import MAX_RUN_FILE_BYTES, write_json_atomic

LINT_FILE = "lint.json"


def write_lint_results(run_dir: Path, findings: list[dict[str, Any]]) -> bool:
    """Keep ``findings`` (lint's ``as_dict()`` form) in ``run_dir``; False when it cannot be
    written (the notices on the console still tell the user; the report lacks its lint key)."""
    try:
        write_json_atomic(run_dir / LINT_FILE, findings)
    except OSError:
        return False
    return True


def read_lint_results(run_dir: Path) -> list[dict[str, Any]] | None:
    """The lint findings kept for a run dir (or its parent, for an attempt's dir), if any."""
    for where in (run_dir, run_dir.parent) if run_dir.name.startswith("attempt-") else (run_dir,):
        path = where / LINT_FILE
        try:
            data = load_json(read_file(path, MAX_RUN_FILE_BYTES), path)
        except FileNotFoundError:
            continue
        except BadInput as e:
            if not e.damaged:
                raise  # a FIFO, a device, a link: exit 2
            return None
        except OSError:
            return None
        if not isinstance(data, list):
            return None
        return [f for f in data if isinstance(f, dict)]
    return None
