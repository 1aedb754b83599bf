"""Create a run dir (owner-only) and record what the run was asked to do.

A run dir that exists already (``--run-dir``) is used only if it is this user's directory
and nobody else can write it: another user's, or a shared writable one, could hold links
planted to make ddpdoctor (run as root, say) overwrite another file.  Files are created
with ``O_EXCL|O_NOFOLLOW`` (``open_new``): a link at a temporary file's name is removed,
never followed.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
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
    """Create ``run_dir`` (or ./ddpdoctor-runs/<run_id>) with mode 0700, or say why not;
    one that exists must be this user's and closed to others' writes (``check_own_dir``)."""
    path = run_dir if run_dir is not None else RUNS_DIR / run_id
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for d in (path, path / "traces", path / "stacks"):
            if d != path:
                d.mkdir(mode=0o700, exist_ok=True)
            check_own_dir(d)
        os.close(open_new(path / ".write-test"))
        (path / ".write-test").unlink()
    except OSError as e:
        raise UserError(f"cannot write the run dir {path}: {e.strerror or e}; "
                        "choose another with --run-dir") from None
    return path.resolve()


def check_own_dir(path: Path) -> None:
    """A UserError unless ``path`` (and the link it is, if one) is a directory of this
    user that no other user can write."""
    me = os.geteuid()
    link = os.lstat(path)
    st = os.stat(path)
    if link.st_uid != me or st.st_uid != me:
        owner = st.st_uid if st.st_uid != me else link.st_uid
        raise UserError(f"the run dir {path} belongs to uid {owner}, not to this user (uid "
                        f"{me}); choose another with --run-dir")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"the run dir {path} is not a directory; choose another with --run-dir")
    if st.st_mode & 0o022:
        raise UserError(f"the run dir {path} can be written by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}); choose another with --run-dir")


def open_new(path: Path, flags: int = os.O_WRONLY) -> int:
    """A file created at ``path`` for this process alone (0600): ``O_EXCL|O_NOFOLLOW``, so a
    link or file planted at that name is removed (never followed) and the file made anew."""
    flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        os.unlink(path)  # a stale temporary file, or a planted link: the link itself goes
        return os.open(path, flags, 0o600)


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
    fd = open_new(tmp)
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
