"""The data probes' batch counts in the trace header and their held-back BATCH records.

Each loader epoch counts its batches in a slot of the header's loader-progress table (see
``layout.OFF_LOADERS``): one store a batch, exact at any moment.  BATCH records past an
epoch's first batches are held here and written ``HOLD`` at a time: among others a record
costs ~1 us, alone after a training step ~10 us of cold caches.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

HOLD = 64  # held BATCH records written together
_BATCH = int(L.RecordKind.BATCH)

held: list[tuple[int, int, int, int, str, int | None]] = []  # BATCH records not yet written
_table_of: tuple[R.Recorder, memoryview] | None = None  # the recorder's loader-progress table
_next_slot = [0]  # where the search for a free slot of that table starts (round robin)
_owners: list[Any] = [None] * L.LOADER_SLOTS  # the LoaderEpoch counting in each slot


def claim_slot(rec: R.Recorder, ep: Any) -> None:
    """Give the epoch a slot of the header's loader-progress table: the next one whose
    epoch ended (or none had), else the next one (its epoch, never ended, stops counting
    there: an iterator the user broke out of, or the oldest of many live ones)."""
    global _table_of
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


def flush_held() -> None:
    """Write the held BATCH records, each at the time its batch was drawn (a group is due,
    an epoch ends or starts, the process exits)."""
    if not held:
        return
    events = held[:]
    del held[:len(events)]  # not clear(): a batch another thread draws meanwhile stays
    rec = R._recorder
    if rec is None:
        return
    for i, epoch, numel, t, prefix, fi in events:
        rec.mark("batch", i, epoch, numel, batch_text(prefix, fi), _BATCH, t)


def batch_text(prefix: str, fi: int | None) -> str:
    """A BATCH record's text without a contents fingerprint: ``|||<loader>:<indices>:-``."""
    return prefix + ("-:-" if fi is None else f"{fi:016x}:-")


def after_fork() -> None:
    """A forked child has a trace of its own: the parent's held records and header table
    are not its to write."""
    global _table_of
    held.clear()
    for i, ep in enumerate(_owners):
        if ep is not None:
            ep.table = None
        _owners[i] = None
    _table_of = None
