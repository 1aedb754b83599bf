"""Create a run dir (owner-only) and record what the run was asked to do.

A run dir that exists already (``--run-dir``) is used only if it is this user's directory
and nobody else can write it: another user's, or a shared writable one, could hold links
planted to make ddpdoctor (run as root, say) overwrite another file.  Every directory on
the way to it is checked too, and every file is written relative to a checked directory
descriptor (``safe_path``): a run dir swapped for a link after the checks changes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.bounded import BadInput, load_json, read_file
from ddpdoctor.rundir.safe_path import CheckedDir, UnsafePath, open_new, write_bytes_atomic

__all__ = ["open_new", "write_bytes_atomic", "write_json_atomic", "make_run_dir",
           "check_own_dir", "read_json_object", "read_run_file"]

RUNS_DIR = Path("ddpdoctor-runs")
RUN_FILE = "run.json"
LIVE_STATE_FILE = "live.json"  # the supervisor's live view (supervisor/live_state.py)
MAX_RUN_FILE_BYTES = 16 << 20  # run.json, node.json, lint.json and the like


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def make_run_dir(run_dir: Path | None, run_id: str) -> Path:
    """Create ``run_dir`` (or ./ddpdoctor-runs/<run_id>) with mode 0700, or say why not;
    one that exists must be this user's and closed to others' writes (``check_own_dir``),
    and so must be every directory on the way to it (``safe_path``)."""
    path = run_dir if run_dir is not None else RUNS_DIR / run_id
    try:
        with CheckedDir(path, create=True) as top:
            _check_own(top.stat(), path)
            clear_earlier_run(top)
            for sub in ("traces", "stacks"):
                with top.subdir(sub, create=True) as d:
                    _check_own(d.stat(), path / sub)
            os.close(top.open_new(".write-test"))
            top.unlink(".write-test")
    except UnsafePath as e:
        raise UserError(f"the run dir {path}: {e.strerror}; choose another with "
                        "--run-dir") from None
    except OSError as e:
        raise UserError(f"cannot write the run dir {path}: {e.strerror or e}; "
                        "choose another with --run-dir") from None
    return path.resolve()


# what a run leaves in its run dir (run, attach, a node's, a restarted job's attempts)
EARLIER_RUN = re.compile(r"traces|stacks|flight_recorder|attempt-\d+|run\.json|report\.json|"
                         r"report\.analyzed\.json|live\.json|lint\.json|supervisor\.jsonl|"
                         r"job\.log|facts\.json|node\.json")


def clear_earlier_run(top: CheckedDir) -> list[str]:
    """A run dir used again (``--run-dir``): what the earlier run left (its traces, its
    events, its report) removed, so that none of it is read as this run's; the names
    removed.  Only a ddpdoctor run dir (one with a run.json) is cleared, only the names a
    run writes, relative to the checked descriptor (a link is removed, never followed);
    one that a running ddpdoctor holds is refused."""
    names = top.names()
    if RUN_FILE not in names:
        return []
    try:
        fcntl.flock(top.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # runs.hold_live's lock
    except BlockingIOError:
        raise UserError(f"the run dir {top.path} is in use by a running ddpdoctor; choose "
                        "another with --run-dir") from None
    finally:
        fcntl.flock(top.fd, fcntl.LOCK_UN)
    removed = []
    for name in sorted(n for n in names if EARLIER_RUN.fullmatch(n)):
        st = os.stat(name, dir_fd=top.fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=top.fd)
        else:
            top.unlink(name)
        removed.append(name)
    return removed


def check_own_dir(path: Path) -> None:
    """A UserError unless ``path`` (and the link it is, if one) is a directory of this
    user that no other user can write."""
    link = os.lstat(path)
    if link.st_uid != os.geteuid():
        _check_own(link, path)
    _check_own(os.stat(path), path)


def _check_own(st: os.stat_result, path: Path) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise UserError(f"the run dir {path} belongs to uid {st.st_uid}, not to this user (uid "
                        f"{me}); choose another with --run-dir")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"the run dir {path} is not a directory; choose another with --run-dir")
    if st.st_mode & 0o022:
        raise UserError(f"the run dir {path} can be written by others (mode "
                        f"{stat.S_IMODE(st.st_mode):o}); choose another with --run-dir")


INDENTED_UP_TO = 4 << 20  # bytes: larger documents are written compact


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename: never a half-written file.
    Indented, unless larger than INDENTED_UP_TO (indenting takes json's pure-Python
    encoder, ten times slower: 30 s for the report of 8,192 ranks)."""
    text = json.dumps(data, default=str)
    if len(text) <= INDENTED_UP_TO:
        text = json.dumps(data, indent=2, default=str)
    write_bytes_atomic(path, (text + "\n").encode())


def is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file() or (path / "traces").is_dir()


def read_run_file(run_dir: Path) -> dict[str, Any]:
    """The run's run.json, or {} when it is missing or unreadable."""
    return read_json_object(run_dir / RUN_FILE)


def read_json_object(path: Path, limit: int = MAX_RUN_FILE_BYTES) -> dict[str, Any]:
    """A JSON object from ``path``, or {} when it is missing, unreadable, damaged or not an
    object; a file that is no regular file or is larger than ``limit`` is a BadInput
    (``bounded``: exit 2), never read."""
    try:
        data = load_json(read_file(path, limit), path)
    except FileNotFoundError:
        return {}
    except BadInput as e:
        if e.damaged:
            return {}
        raise
    except OSError:
        return {}
    return data if isinstance(data, dict) else {}


def free_bytes(path: Path) -> int | None:
    """Bytes free to an unprivileged writer on ``path``'s file system (None if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
