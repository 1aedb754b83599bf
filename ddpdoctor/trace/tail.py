"""TraceTail: one process's trace ring, read incrementally while the process writes it.

The supervisor (``supervisor.watch.LiveRank``) and the live TUI (``tui.live_follow.RankTail``)
both follow a running rank this way: a poll with nothing new costs one 8-byte read of the
header's count; otherwise the header is read again and only the records appended since the
last read are unpacked, newest ``max_new`` at most.  Records the caller leaves open (no end
time yet) are kept by index until their end is written or the ring reuses their slot.
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import TraceFile, TraceHeader, meta_path_for, read_meta

_I64 = struct.Struct("<q")
_T_END = struct.Struct(f"<{L.OFF_REC_T_END}xq")
_HEADER_SIZE = L.HEADER_SIZE
_RECORD_SIZE = L.RECORD_SIZE
_OFF_KIND = 8  # the kind byte, right after the commit


class TraceTail:
    """A trace file followed from record ``read_upto`` on, with its groups' names.

    ``open`` maps the index of a record whose call has not returned to whatever the caller
    made of it; ``returned`` hands those back once the record has an end time or its slot
    was reused.
    """

    def __init__(self, file: TraceFile, max_new: int | None = None) -> None:
        self.file = file
        self.header = file.header()
        self.read_upto = 0  # records [0, read_upto) have been read
        self.max_new = max_new  # new records unpacked per read at most (None: the ring's)
        self.groups: dict[int, str] = {}  # local group index -> name, from the meta log
        self.group_ranks: dict[str, list[int]] = {}  # group name -> its global ranks
        self.open: dict[int, Any] = {}  # record index -> the caller's open call
        self._buf = file._map

    def grew(self) -> bool:
        """Were records appended since the last ``new_records``?  One 8-byte read."""
        return _I64.unpack_from(self._buf, L.OFF_COUNT)[0] != self.read_upto

    def refresh(self) -> TraceHeader:
        """Read the header again (raises TraceError if the file was truncated in place)."""
        self.header = self.file.header()
        return self.header

    def slots(self) -> int:
        """The ring's slots this file holds: fewer than its capacity when truncated."""
        return min(self.header.capacity, (len(self._buf) - _HEADER_SIZE) // _RECORD_SIZE)

    def new_records(self, kinds: tuple[int, ...]) -> Iterator[tuple[int, tuple]]:
        """(index, raw ``layout.RECORD`` fields) of each whole record of one of ``kinds``
        appended up to the header's count since the last call, oldest first; records the
        ring or ``max_new`` left behind, torn ones and those past a truncated file's end are
        skipped.  ``read_upto`` moves to the count once the iterator is exhausted."""
        buf, h = self._buf, self.header
        cap, count = h.capacity, h.count
        slots = self.slots()
        start = max(self.read_upto, count - cap,
                    count - (self.max_new if self.max_new is not None else cap))
        unpack = L.RECORD.unpack_from
        for index in range(start, count):
            slot = index % cap
            if slot >= slots:
                continue
            off = _HEADER_SIZE + slot * _RECORD_SIZE
            if buf[off + _OFF_KIND] not in kinds:
                continue
            v = unpack(buf, off)
            if v[0] == index + 1:  # else torn or overwritten
                yield index, v
        self.read_upto = count

    def returned(self) -> list[tuple[Any, int]]:
        """Forget the open records that have returned or were overwritten since; each as
        (what ``open`` held, its end time in ns, 0 when the ring reused its slot)."""
        out: list[tuple[Any, int]] = []
        if not self.open:
            return out
        buf, cap = self._buf, self.header.capacity
        for index in list(self.open):
            off = _HEADER_SIZE + (index % cap) * _RECORD_SIZE
            if _I64.unpack_from(buf, off)[0] != index + 1:
                out.append((self.open.pop(index), 0))
                continue
            t_end = _T_END.unpack_from(buf, off)[0]
            if t_end:
                out.append((self.open.pop(index), t_end))
        return out

    def group(self, index: int) -> str:
        """The name of local group ``index``: the meta log is read again for an index not
        seen yet; one it does not name is the index as text."""
        if index not in self.groups:
            self.read_groups()
        return self.groups.get(index, str(index))

    def read_groups(self) -> None:
        """Add the groups the meta log names (and their ranks) to ``groups``."""
        events, _ = read_meta(meta_path_for(self.file.path))
        for g in events:
            if g.get("event") == "group" and type(g.get("index")) is int:
                name = str(g.get("name", g["index"]))
                self.groups[g["index"]] = name
                if isinstance(g.get("ranks"), list):
                    self.group_ranks[name] = [r for r in g["ranks"] if isinstance(r, int)]


class TailView:
    """A follower built on a ``TraceTail`` (its ``tail``): the tail's file, header, read
    position, groups and open records, as its own attributes."""

    tail: TraceTail

    @property
    def file(self) -> TraceFile:
        return self.tail.file

    @property
    def header(self) -> TraceHeader:
        return self.tail.header

    @header.setter
    def header(self, header: TraceHeader) -> None:
        self.tail.header = header

    @property
    def read_upto(self) -> int:
        """Records [0, read_upto) have been read."""
        return self.tail.read_upto

    @property
    def groups(self) -> dict[int, str]:
        return self.tail.groups

    @property
    def group_ranks(self) -> dict[str, list[int]]:
        return self.tail.group_ranks

    @property
    def open(self) -> dict[int, Any]:
        """Record index -> what the follower made of a call that has not returned."""
        return self.tail.open
