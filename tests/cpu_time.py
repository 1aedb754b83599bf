"""The CPU time of the code under test alone, for the few tests that hold a bound on it."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def own_cpu_seconds() -> Iterator[list[float]]:
    """Yields a list that holds, once the block is done, the CPU seconds it took.  What the
    test process held before (torch, the objects of earlier tests: twice the code's own
    cost on a pytest worker) is frozen out of the garbage collector meanwhile, so that a
    collection walks only what the code under test made, as in a process of its own."""
    gc.collect()
    gc.freeze()
    took: list[float] = []
    start = time.process_time()
    try:
        yield took
    finally:
        took.append(time.process_time() - start)
        gc.unfreeze()
