"""The data probes' batch counts in the trace header's loader-progress table, kept off the
training step: the probes count an epoch's first batches and its end, a sampling thread
the batches in between (from the iterator's own ``_num_yielded``).

Each loader epoch counts in a slot of the table (see ``layout.OFF_LOADERS``).  A count is
exact for an epoch that ended, a rank that waits (the thread samples every
``SAMPLE_EVERY_S``), a rank that exits (a last sample at exit) and an iterator the user
dropped (a last sample as it goes); a rank killed mid-epoch leaves its count of at most
``SAMPLE_EVERY_S`` before.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

SAMPLE_EVERY_S = 0.1  # how often the thread reads the live iterators' counts
LOCK_WAIT_S = 0.05  # a count gives up rather than wait longer (never a hang at exit)

_lock = threading.Lock()  # one writer of the table at a time: the rank's thread or this one
_stop = threading.Event()  # set at exit: the thread ends
_table_of: tuple[R.Recorder, memoryview] | None = None  # the recorder's loader-progress table
_next_slot = [0]  # where the search for a free slot of that table starts (round robin)
_owners: list[Any] = [None] * L.LOADER_SLOTS  # the LoaderEpoch counting in each slot
_thread: list[threading.Thread | None] = [None]


def claim_slot(rec: R.Recorder, ep: Any) -> None:
    """Give the epoch a slot of the header's loader-progress table: the next one whose
    epoch ended (or none had), else the next one (its epoch, never ended, stops counting
    there: an iterator the user broke out of, or the oldest of many live ones)."""
    global _table_of
    with _lock:
        if _table_of is None or _table_of[0] is not rec:
            _table_of = (rec, rec.writer.loader_table())
        table = _table_of[1]
        n = L.LOADER_SLOTS
        start = _next_slot[0]
        k = next((s % n for s in range(start, start + n)
                  if _owners[s % n] is None or _owners[s % n].ended), start % n)
        _next_slot[0] = k + 1
        old = _owners[k]
        if old is not None:
            old.table = None
        _owners[k] = ep
        base = k * 4
        table[base + 2] = 0  # empty while its identity changes
        table[base + 3] = 0
        table[base] = ep.loader
        table[base + 1] = ep.epoch
        ep.table, ep.slot = table, base + 2


def count(ep: Any, n: int, now: int) -> bool:
    """The epoch drew ``n`` batches by ``now``: its slot says so (a count is never
    lowered).  True if the count moved.  The lock is waited for briefly only: at the
    interpreter's exit a daemon thread may have died holding it."""
    if not _lock.acquire(timeout=LOCK_WAIT_S):
        return False
    try:
        table = ep.table
        if table is None or n <= table[ep.slot]:
            return False
        table[ep.slot] = n
        table[ep.slot + 1] = now
        return True
    finally:
        _lock.release()


def drawn(it: Any) -> int | None:
    """Batches the iterator yielded this epoch (torch's own count), None if unknown."""
    n = getattr(it, "_num_yielded", None)
    return n if type(n) is int else None


def live() -> list[tuple[Any, Any]]:
    """(epoch, iterator) of every epoch still counting whose iterator is alive."""
    out = []
    for ep in list(_owners):
        if ep is None or ep.ended or ep.table is None or ep.iter_ref is None:
            continue
        it = ep.iter_ref()
        if it is not None:
            out.append((ep, it))
    return out


def sample() -> None:
    """Read every live epoch's count from its iterator (the thread's tick)."""
    now = time.time_ns()
    moved = False
    for ep, it in live():
        n = drawn(it)
        if n is not None and count(ep, n, now):
            moved = True
    rec = R._recorder
    if moved and rec is not None and rec.enabled and now >= rec._heartbeat_due:
        rec.heartbeat(now)  # the batches are the rank's activity


def _run() -> None:
    while not _stop.wait(SAMPLE_EVERY_S):
        try:
            sample()
        except Exception as e:  # noqa: BLE001 - counts stop; the job runs on
            rec = R._recorder
            if rec is not None and not _stop.is_set() and not sys.is_finalizing():
                rec.note_error("batch count sampling (stopped)", e)
            return


def stop() -> None:
    """At exit: the thread ends (the exit's own last counts are the caller's)."""
    _stop.set()


def start() -> None:
    """Start the sampling thread (once per process)."""
    if _thread[0] is None:
        _thread[0] = threading.Thread(target=_run, name="ddpdoctor-batch-counts", daemon=True)
        _thread[0].start()


def after_fork() -> None:
    """A forked child has a trace of its own and no thread: the parent's table, slots and
    lock (perhaps held by the parent's thread at the fork) are not its own."""
    global _table_of, _lock, _stop
    _lock = threading.Lock()
    _stop = threading.Event()
    for i, ep in enumerate(_owners):
        if ep is not None:
            ep.table = None
        _owners[i] = None
    _table_of = None
    _thread[0] = None
