"""Ask the ranks for their torch flight recorder dumps at a verdict, and wait for them."""

from __future__ import annotations

import time
from pathlib import Path

from ddpdoctor.rundir.layout import write_bytes_atomic
from ddpdoctor.trace import fr_files
from ddpdoctor.rundir.safe_path import make_dirs

WAIT_S = 2.0  # ranks poll every 0.5 s; a dump of a few thousand entries takes milliseconds


def request_dumps(run_dir: Path) -> float:
    """Touch the request file every rank watches; returns the request's time."""
    path = fr_files.request_path(run_dir)
    make_dirs(path.parent)
    write_bytes_atomic(path, f"{time.time_ns()}\n".encode())
    return path.stat().st_mtime


def wait_for_dumps(run_dir: Path, ranks: list[int], since: float,
                   timeout: float = WAIT_S) -> list[int]:
    """Wait until every rank in ``ranks`` wrote a dump newer than ``since``; returns the
    ranks whose dump is missing when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for rank in ranks:
            try:
                fresh = fr_files.dump_path(run_dir, rank).stat().st_mtime >= since
            except OSError:
                fresh = False
            if not fresh:
                missing.append(rank)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)
