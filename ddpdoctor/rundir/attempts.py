"""Elastic restarts in the run dir: one RUN_DIR/attempt-K/ per attempt of torchrun's agent."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from ddpdoctor.rundir.safe_path import CheckedDir

ATTEMPTS_ENV = "DDPDOCTOR_ATTEMPTS"  # set for the job when it may restart: ranks use attempt dirs
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's agent in every worker
_ATTEMPT_DIR = re.compile(r"attempt-(\d+)")
_MAX_RESTARTS = ("--max-restarts", "--max_restarts")
_LAUNCHERS = ("torchrun", "torch.distributed.run")


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    """The run dir of one attempt."""
    return run_dir / f"attempt-{attempt}"


def attempt_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """The attempt dirs under ``run_dir``, in attempt order ([] for a job without restarts)."""
    found = []
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        m = _ATTEMPT_DIR.fullmatch(entry.name)
        if m and entry.is_dir():
            found.append((int(m.group(1)), entry))
    return sorted(found)


def is_attempt_dir(path: Path) -> bool:
    """Is ``path`` one attempt's dir (RUN_DIR/attempt-K) of a restarted job?"""
    return _ATTEMPT_DIR.fullmatch(path.name) is not None and (path.parent / "traces").is_dir()


def make_attempt_dir(run_dir: Path, attempt: int) -> Path:
    """Create RUN_DIR/attempt-K/ with its traces/ and stacks/ (owner only); idempotent."""
    path = attempt_dir(run_dir, attempt)
    with CheckedDir(path, create=True) as top:
        for sub in ("traces", "stacks"):
            top.subdir(sub, create=True).close()
    return path


def _launcher_args(argv: Sequence[str]) -> Sequence[str]:
    """The part of ``argv`` that holds torchrun's own options (before the script)."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "torchrun" or arg in _LAUNCHERS:
            rest = argv[i + 1:]
            end = next((j for j, a in enumerate(rest) if not a.startswith("-") and
                        (j == 0 or not _takes_value(rest[j - 1]))), len(rest))
            return rest[:end]
    return ()


def _takes_value(option: str) -> bool:
    return option.startswith("-") and "=" not in option and option not in ("--standalone", "--no-python", "--no_python",
                                                 "-m", "--module", "--run-path", "--run_path")


def launcher_option(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of one of torchrun's options (any spelling in ``names``) in a job's argv."""
    args = list(_launcher_args(argv))
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            if not eq and i + 1 < len(args):
                value = args[i + 1]
            return value
    return None


def max_restarts(argv: Sequence[str]) -> int:
    """torchrun's --max-restarts in a job's argv (0 when absent, unreadable or no torchrun)."""
    value = launcher_option(argv, _MAX_RESTARTS)
    try:
        return max(0, int(value)) if value is not None else 0
    except ValueError:
        return 0
