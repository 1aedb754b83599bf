"""Create a run dir (owner-only) and record what the run was asked to do."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from ddpdoctor.errors import UserError

RUNS_DIR = Path("ddpdoctor-runs")
RUN_FILE = "run.json"
LIVE_STATE_FILE = "live.json"  # the supervisor's live view (supervisor/live_state.py)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def make_run_dir(run_dir: Path | None, run_id: str) -> Path:
    """Create ``run_dir`` (or ./ddpdoctor-runs/<run_id>) with mode 0700, or say why not."""
    path = run_dir if run_dir is not None else RUNS_DIR / run_id
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        (path / "traces").mkdir(mode=0o700, exist_ok=True)
        (path / "stacks").mkdir(mode=0o700, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write the run dir {path}: {e.strerror or e}; "
                        "choose another with --run-dir") from None
    return path.resolve()


INDENTED_UP_TO = 4 << 20  # bytes: larger documents are written compact


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename: never a half-written file.
    Indented, unless larger than INDENTED_UP_TO (indenting takes json's pure-Python
    encoder, ten times slower: 30 s for the report of 8,192 ranks)."""
    text = json.dumps(data, default=str)
    if len(text) <= INDENTED_UP_TO:
        text = json.dumps(data, indent=2, default=str)
    write_bytes_atomic(path, (text + "\n").encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (owner-only, 0600) via a temporary file and rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass  # nothing to clean up
        raise


def is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file() or (path / "traces").is_dir()


def read_run_file(run_dir: Path) -> dict[str, Any]:
    """The run's run.json, or {} when it is missing or unreadable."""
    return read_json_object(run_dir / RUN_FILE)


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def free_bytes(path: Path) -> int | None:
    """Bytes free to an unprivileged writer on ``path``'s file system (None if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
