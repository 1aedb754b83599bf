"""The stress scripts' one harness: a run N times, a few at a time, each in a folder of its
own, each result judged and printed as it comes (tests/stress_*.py)."""

from __future__ import annotations

import concurrent.futures
import tempfile
from pathlib import Path
from typing import Any, Callable


def run_many(one_run: Callable[[int, Path], Any], ok: Callable[[Any], bool], runs: int,
             jobs: int, prefix: str) -> tuple[int, Path]:
    """``one_run(i, folder)`` ``runs`` times, ``jobs`` at a time; one line a run (``ok`` or
    not, and what it gave); returns (how many were not ok, the folder of the runs)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    places = [base / f"run-{i}" for i in range(runs)]
    for where in places:
        where.mkdir()
    bad = 0
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for where, got in zip(places, pool.map(one_run, range(runs), places)):
            good = ok(got)
            bad += not good
            print(f"{'ok' if good else 'WRONG'} {where.name}: {got}", flush=True)
    return bad, base
