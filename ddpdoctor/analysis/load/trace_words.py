"""Reading trace files in bulk for the fast divergence scan: headers, group names, and a
rank's collective records as one numpy array."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ddpdoctor.rundir.bounded import open_regular, read_file
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.meta_line import parse_meta_line
from ddpdoctor.trace.reader import (MAX_META_BYTES, RankTrace, TraceError, TraceHeader,
                                    decode_slots, meta_path_for, read_header_file,
                                    runtime_errors)
from ddpdoctor.trace.text import clean
from ddpdoctor.trace.record import group_names as meta_group_names

RECORD_DTYPE = np.dtype({
    "names": list(L.RECORD_FIELDS),
    "formats": ["<i8", "u1", "u1", "u1", "u1", "<i4", "<i8", "<i8", "<i8", "<i8", "<i4",
                "<i4", "<i8", "<i8", f"S{L.TEXT_SIZE}"],
    "offsets": [0, 8, 9, 10, 11, 12, 16, 24, 32, 40, 48, 52, 56, 64, 72],
    "itemsize": L.RECORD_SIZE,
})
"""One trace record as a numpy structured dtype (the same bytes as ``layout.RECORD``)."""

WORDS = L.RECORD_SIZE // 8  # a record as 32 little-endian uint64 words
W_OPS = 1  # word 1: kind, op, reduce op, flags, group
_KIND_COLL = int(L.RecordKind.COLLECTIVE)

assert RECORD_DTYPE.itemsize == L.RECORD_SIZE and L.RECORD_SIZE % 8 == 0


@dataclass
class RankFile:
    """One rank's trace file and, after the scan, where each of its collectives lives:
    per group either a contiguous run (first seq, first slot, length) or arrays."""

    path: Path
    header: TraceHeader
    runs: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    seqs: dict[str, np.ndarray] = field(default_factory=dict)
    slots: dict[str, np.ndarray] = field(default_factory=dict)

    def slot_of(self, group: str, seq: int) -> int | None:
        run = self.runs.get(group)
        if run is not None:
            first_seq, first_slot, n = run
            return first_slot + seq - first_seq if 0 <= seq - first_seq < n else None
        seqs = self.seqs.get(group)
        if seqs is None:
            return None
        hit = np.flatnonzero(seqs == seq)
        return int(self.slots[group][hit[-1]]) if hit.size else None




def read_trace_header(path: Path) -> TraceHeader:
    return read_header_file(path)


def rank_files(run_dirs: list[Path], problems: list[str]) -> list[RankFile]:
    """The newest process of every rank (a restarted rank replaces the old one)."""
    newest: dict[int, RankFile] = {}
    for run_dir in run_dirs:
        for path in sorted((Path(run_dir) / "traces").glob("pid-*.ring")):
            try:
                h = read_trace_header(path)
            except TraceError as e:
                problems.append(str(e))
                continue
            if h.rank < 0:
                continue  # a launcher
            old = newest.get(h.rank)
            if old is None or h.started_ns > old.header.started_ns:
                newest[h.rank] = RankFile(path, h)
    return [newest[r] for r in sorted(newest)]


# The writer's own spelling of a group event (json.dumps of Recorder's keyword order);
# anything else is parsed as JSON.
_GROUP_LINE = re.compile(rb'^\{"index": (\d+), "name": ("(?:[^"\\]|\\.)*")')


def group_names(path: Path, problems: list[str]) -> dict[int, str]:
    """Local group index -> name, from the meta log's ``group`` events."""
    names: dict[int, str] = {}
    try:
        data = read_file(meta_path_for(path), MAX_META_BYTES, head=True)
    except FileNotFoundError:
        return names
    except OSError as e:
        problems.append(f"{path.name}: meta log unreadable ({e.strerror or e})")
        return names
    for line in data.splitlines():
        if b'"group"' not in line:
            continue
        m = _GROUP_LINE.match(line)
        try:
            if m is not None:
                names[int(m[1])] = clean(str(json.loads(m[2])))
                continue
            ev = parse_meta_line(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(ev, dict) and ev.get("event") == "group" and \
                isinstance(ev.get("index"), int):
            names[ev["index"]] = clean(str(ev.get("name", ev["index"])))
    return names


class Buffer:
    """One reusable read buffer (a rank's records are consumed before the next is read)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._aranges: dict[int, np.ndarray] = {}
        self.last: memoryview = memoryview(b"")  # the rank's ring as last read, slot 0 first

    def read(self, path: Path, nbytes: int) -> memoryview:
        if len(self._buf) < nbytes:
            self._buf = bytearray(nbytes)
        view = memoryview(self._buf)[:nbytes]
        fd = open_regular(path)  # the header was read from a regular file: still one
        with open(fd, "rb", buffering=0) as f:
            f.seek(L.HEADER_SIZE)
            got = f.readinto(view)
        self.last = view[:got or 0]
        return self.last

    def arange(self, n: int) -> np.ndarray:
        a = self._aranges.get(n)
        if a is None:
            a = self._aranges[n] = np.arange(n, dtype=np.int64)
        return a


def load_words(rf: RankFile, buf: Buffer) -> tuple[np.ndarray, np.ndarray | None]:
    """The rank's valid collective records as (words (n, 32) uint64, slots or None when
    they are the slots 0..n-1 themselves).  The words may live in ``buf``."""
    h = rf.header
    buf.last = memoryview(b"")
    cap, count = h.capacity, h.count
    size = os.path.getsize(rf.path)
    avail = max(0, (size - L.HEADER_SIZE) // L.RECORD_SIZE)
    used = min(cap, count, avail)
    if used <= 0:
        return np.zeros((0, WORDS), np.uint64), None
    raw = buf.read(rf.path, used * L.RECORD_SIZE)
    n = len(raw) // L.RECORD_SIZE
    words = np.frombuffer(raw, np.uint64, n * WORDS).reshape(n, WORDS)
    slot = buf.arange(n)
    first = max(0, count - cap)
    index = slot if first == 0 else first + (slot - first % cap) % cap
    commits = words[:, 0].view(np.int64)
    if first == 0 and commits[0] == 1 and commits[-1] == n:
        valid = commits == slot + 1
    else:
        valid = commits == index + 1
    valid &= (words[:, W_OPS] & np.uint64(0xFF)) == np.uint64(_KIND_COLL)
    if valid.all():
        return words, None
    return words[valid], slot[valid]


def tail_trace(rf: RankFile, raw: memoryview, tail: int, also: list[int],
               meta: list[dict], meta_problems: list[str]) -> RankTrace:
    """The rank as ``read_trace(path, tail)`` reads it, from the bytes the scan read: its
    newest ``tail`` records and those of ``also`` (record indices), and its meta log."""
    h = rf.header
    cap, count = h.capacity, h.count
    first = max(0, count - cap)
    wanted = set(range(max(first, count - tail), count))
    wanted.update(i for i in also if first <= i < count)
    records, _ = decode_slots(raw, 0, sorted(wanted), cap, h.rank, meta_group_names(meta))
    return RankTrace(rf.path, h, records, meta, 0, meta_problems + runtime_errors(h, meta))
