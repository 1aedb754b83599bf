"""One loader epoch as the data probes know it, and its end (the ``loader_end`` event)."""

from __future__ import annotations

import time
from typing import Any

from ddpdoctor.runtime import batch_counts as B
from ddpdoctor.runtime import recorder as R

FIRST_FPS = 8  # an epoch's first batches: probed one by one (fingerprints, BATCH records)
CONTENT_EPOCHS = 2  # epochs of each loader whose first batches' contents are fingerprinted


class LoaderEpoch:
    """What the probes know about one iteration (epoch) of one DataLoader."""

    __slots__ = ("loader", "epoch", "batches", "prints", "order", "content", "steps0",
                 "ended", "indices", "prefix", "contents", "table", "slot", "iter_ref",
                 "to_end")

    def __init__(self, loader: int, epoch: int, steps0: int, indices: Any = None):
        self.loader = loader
        self.epoch = epoch
        self.batches = 0  # batches the probes saw counted (the thread counts the others)
        self.prints: list[str] = []
        self.order = 0  # running digest of the first batches' order (indices, else contents)
        self.content = 0  # running digest of the first batches' contents
        self.steps0 = steps0
        self.ended = False
        self.indices = indices  # the tap's FIFO of (indices print, size), None: no tap
        self.prefix = f"|||{loader}:"  # the BATCH records' text starts so
        # batches whose contents are fingerprinted: the first ones of the first epochs
        self.contents = FIRST_FPS if epoch < CONTENT_EPOCHS else 0
        self.table: memoryview | None = None  # the header's loader-progress table ...
        self.slot = 0  # ... and where this epoch's batch count sits in it
        self.iter_ref: Any = None  # the iterator (weakly), for the thread's counts
        self.to_end = False  # the batch hook stays to the epoch's end (set by its start)


def end_epoch(rec: R.Recorder, ep: LoaderEpoch, it: Any) -> None:
    ep.ended = True
    n = max(ep.batches, B.drawn(it) or 0)
    ep.batches = n
    B.count(ep, n, time.time_ns())
    first = ep.prints if ep.contents else []  # kept while contents are fingerprinted
    rec.meta("loader_end", loader=ep.loader, epoch=ep.epoch, batches=n,
             order=f"{ep.order:016x}" if ep.order else None,
             content=f"{ep.content:016x}", first=first, steps=rec.steps - ep.steps0)


def fetcher_tells_end(it: Any) -> bool:
    """Does the iterator's fetcher say when its iterable dataset ran dry (``ended``)?  In
    one process, with batches: the batch after it is the epoch's StopIteration."""
    fetcher = getattr(it, "_dataset_fetcher", None)
    return getattr(it, "_num_workers", 0) == 0 and getattr(fetcher, "ended", None) is False \
        and getattr(fetcher, "auto_collation", False) is True


def freed(it: Any) -> None:
    """An iterator about to be freed (or still open at exit): its last count, and its
    epoch's end if its iterable dataset ran dry (the loop's StopIteration came unseen)."""
    ep = it.__dict__.get("_ddpdoctor_epoch")
    if ep is None or ep.ended:
        return
    n = B.drawn(it)
    if n is not None:
        B.count(ep, n, time.time_ns())
    rec = R._recorder
    if ep.indices is None and not ep.to_end and \
            getattr(getattr(it, "_dataset_fetcher", None), "ended", False) is True and \
            rec is not None and rec.enabled:
        end_epoch(rec, ep, it)
