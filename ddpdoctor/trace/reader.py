"""Read a rank's trace (header, records, meta events) from a run dir, tolerating damage."""

from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from ddpdoctor.rundir.bounded import open_regular, read_file
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.meta_line import parse_meta_line
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.text import clean, clean_value, may_hold_control
from ddpdoctor.trace.record import (CallRecord, filled, group_name, group_names,
                                    starts_iteration)

MAX_META_BYTES = 64 << 20  # a meta log larger than this is read only up to here
MAX_META_LINE = 1 << 20


class TraceError(Exception):
    """A trace file that cannot be read; the message says which file and why."""


_LOADER_TABLE = struct.Struct(f"<{L.LOADER_SLOTS * 4}q")


class LoaderCount(NamedTuple):
    """One slot of a header's loader-progress table: how far a loader epoch got."""

    loader: int
    epoch: int
    batches: int
    t_last_ns: int  # wall time of its last batch drawn


@dataclass(frozen=True)
class TraceHeader:
    """A rank's self-reported state at the moment of reading."""

    pid: int
    rank: int
    world_size: int
    local_rank: int
    state: L.RankState
    exit_code: int | None
    step: int
    epoch: int
    count: int
    heartbeat_ns: int
    last_seq: int
    started_ns: int
    host: str
    run_id: str
    capacity: int
    loaders: tuple[LoaderCount, ...] = ()  # the loader epochs counted in the header


@dataclass
class RankTrace:
    """Everything one process recorded."""

    path: Path
    header: TraceHeader
    records: list[CallRecord]
    meta: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0  # records lost to ring wrap-around or torn writes
    problems: list[str] = field(default_factory=list)

    def meta_events(self, event: str) -> list[dict[str, Any]]:
        return [m for m in self.meta if m.get("event") == event]

    def groups(self) -> dict[int, dict[str, Any]]:
        """Local group index -> {"name", "ranks"} from this process's meta log."""
        return {g["index"]: g for g in self.meta_events("group")
                if type(g.get("index")) is int and 0 <= g["index"] < 1 << 31}

    def group_names(self) -> dict[int, str]:
        """Local group index -> name from this process's meta log."""
        return group_names(self.meta)


def parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    """``"10;3x4;"`` -> ``((10,), (3, 4), ())``; an empty string is no tensors."""
    if not text:
        return ()
    out = []
    for part in text.split(";"):
        dims = tuple(int(d) for d in part.split("x") if d != "") if part != "-" else ()
        out.append(dims)
    return tuple(out)


def format_shapes(shapes: list[tuple[int, ...]] | tuple[tuple[int, ...], ...]) -> str:
    """Inverse of ``parse_shapes``; a 0-d tensor is ``-``."""
    return ";".join("x".join(map(str, s)) if len(s) else "-" for s in shapes)


@functools.lru_cache(maxsize=2048)
def decode_fields(raw: bytes) -> tuple[tuple, tuple, tuple, str, str, str]:
    """(in_shapes, out_shapes, dtypes, callsite, framework_site, origin letter) of a
    record's text; a loop repeats a few texts, so they are parsed once."""
    text = raw.rstrip(b"\0").decode("utf-8", "replace")
    parts = text.split("|", 5)
    while len(parts) < 6:
        parts.append("")
    try:
        ins, outs = parse_shapes(parts[0]), parse_shapes(parts[1])
    except ValueError:
        ins, outs = (), ()
    dtypes = tuple(clean(d) for d in parts[2].split(";") if d)
    return ins, outs, dtypes, clean(parts[3]), clean(parts[4]), parts[5]


def decode_text(raw: bytes) -> tuple[tuple, tuple, tuple, str, str]:
    """(in_shapes, out_shapes, dtypes, callsite, framework_site) of a record's text."""
    return decode_fields(raw)[:5]


_NO_NAMES: dict[int, str] = {}


def _name(table: tuple[str, ...], code: int) -> str:
    return table[code] if 0 <= code < len(table) else f"code{code}"


def read_header(buf: bytes | mmap.mmap, path: Path) -> TraceHeader:
    if len(buf) < L.HEADER.size:
        raise TraceError(f"{path}: too short for a trace header ({len(buf)} bytes)")
    v = dict(zip(L.HEADER_FIELDS, L.HEADER.unpack_from(buf, 0)))
    if v["magic"] != L.MAGIC:
        raise TraceError(f"{path}: not a ddpdoctor trace (bad magic)")
    if v["version"] != L.VERSION or v["record_size"] != L.RECORD_SIZE:
        raise TraceError(f"{path}: trace version {v['version']} is not supported")
    if not 0 < v["capacity"] <= 1 << 24:
        raise TraceError(f"{path}: implausible capacity {v['capacity']}")
    try:
        state = L.RankState(v["state"])
    except ValueError:
        state = L.RankState.STARTING
    return TraceHeader(
        pid=v["pid"], rank=v["rank"], world_size=v["world_size"], local_rank=v["local_rank"],
        state=state, exit_code=None if v["exit_code"] == -1 << 31 else v["exit_code"],
        step=v["step"], epoch=v["epoch"], count=max(0, v["count"]),
        heartbeat_ns=v["heartbeat_ns"], last_seq=v["last_seq"], started_ns=v["started_ns"],
        host=clean(v["host"].rstrip(b"\0").decode("utf-8", "replace")),
        run_id=clean(v["run_id"].rstrip(b"\0").decode("utf-8", "replace")),
        capacity=v["capacity"],
        loaders=read_loader_counts(buf),
    )


def read_header_file(path: Path) -> TraceHeader:
    """The header of the trace at ``path``, read alone (a regular file only: BadInput, exit
    2, for a FIFO, a device or a link; TraceError when it is no trace)."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror or e}") from None
    try:
        head = os.read(fd, L.HEADER_SIZE)
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return read_header(head, path)


def read_loader_counts(buf: bytes | mmap.mmap) -> tuple[LoaderCount, ...]:
    """The header's loader-progress slots that hold a count (none in a shorter header)."""
    if len(buf) < L.HEADER_USED:
        return ()
    v = _LOADER_TABLE.unpack_from(buf, L.OFF_LOADERS)  # one call: read at every poll
    out = [LoaderCount(*v[i:i + 4]) for i in range(0, len(v), 4) if v[i + 2] > 0]
    return tuple(sorted(out, key=lambda c: (c.loader, c.epoch)))


def decode_record(buf: bytes | mmap.mmap, off: int, index: int, rank: int = -1,
                  names: dict[int, str] | None = None, iteration: int = -1
                  ) -> CallRecord | None:
    """The record of ``index`` at ``off``, or None when the slot holds another (torn/reused);
    ``rank``, ``names`` (local group index -> name) and ``iteration`` as the caller knows
    them (a BATCH that starts an iteration gets the next one: see ``read_records``)."""
    v = L.RECORD.unpack_from(buf, off)
    if v[0] != index + 1:
        return None
    return record_of(v, index, rank, names, iteration)


def record_of(v: tuple, index: int, rank: int = -1, names: dict[int, str] | None = None,
              iteration: int = -1) -> CallRecord | None:
    """The record of ``index`` from its raw ``layout.RECORD`` fields ``v`` (whose commit
    the caller checked); None for a kind this version does not know."""
    try:
        kind = L.RecordKind(v[1])
    except ValueError:
        return None
    ins, outs, dtypes, callsite, framework_site, code = decode_fields(v[14])
    op = _name(L.OPS, v[2])
    return filled(
        rank=rank, group=group_name(v[5], names or _NO_NAMES), group_index=v[5], seq=v[6],
        op=op, reduce_op=_name(L.REDUCE_OPS, v[3]), in_shapes=ins, out_shapes=outs,
        dtypes=dtypes, peer=v[10], flags=v[4], callsite=callsite, t_start=v[7], t_end=v[8],
        aux=v[11], kind=kind, framework_site=framework_site,
        origin=Origin.of(code, op, v[4]) if kind <= L.RecordKind.P2P else Origin.USER,
        index=index, numel=v[9], nbytes=v[12], parent=v[13], iteration=iteration)


def decode_slots(buf: bytes | mmap.mmap | memoryview, base: int, indices: Iterable[int],
                 cap: int, rank: int, names: dict[int, str]) -> tuple[list[CallRecord], int]:
    """The records of ``indices`` (ascending) from a ring whose slot 0 is at ``base`` in
    ``buf``, with ``rank``, the groups' ``names`` and each record's iteration: a BATCH
    record that starts one (``record.starts_iteration``) begins the next, counted from 0
    over the records decoded.  Returns them and how many slots held no such record."""
    avail = max(0, (len(buf) - base) // L.RECORD_SIZE)
    records: list[CallRecord] = []
    lost, iteration = 0, -1
    for index in indices:
        slot = index % cap
        rec = decode_record(buf, base + slot * L.RECORD_SIZE, index, rank, names,
                            iteration) if slot < avail else None
        if rec is None:
            lost += 1
            continue
        if rec.kind == L.RecordKind.BATCH and starts_iteration(rec.kind, rec.callsite):
            iteration += 1
            rec = replace(rec, iteration=iteration)
        records.append(rec)
    return records, lost


def read_records(buf: bytes | mmap.mmap, header: TraceHeader, last: int | None = None,
                 names: dict[int, str] | None = None) -> tuple[list[CallRecord], int]:
    """Decode the ring's records oldest first (only the newest ``last`` if given), with the
    header's rank and the groups' ``names`` (see ``decode_slots``).  Returns the records
    and how many were lost."""
    count, cap = header.count, header.capacity
    first = max(0, count - cap)
    if last is not None:
        first = max(first, count - last)
    indices: Iterable[int] = range(first, count)
    avail = max(0, (len(buf) - L.HEADER_SIZE) // L.RECORD_SIZE)
    if avail < min(count - first, cap):  # a file shorter than the ring its header claims
        # (damaged or forged): only the slots it holds, not a loop over every claimed one
        indices = sorted(i for s in range(avail) if (i := first + (s - first) % cap) < count)
    records, lost = decode_slots(buf, L.HEADER_SIZE, indices, cap, header.rank, names or {})
    lost += (count - first) - len(indices)
    return records, first + lost if last is None else 0


def read_meta(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse a meta log; bad lines are skipped and counted in the returned problems."""
    try:
        data = read_file(path, MAX_META_BYTES, head=True)  # a regular file, never a FIFO
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"{path}: {e.strerror}"]
    return parse_meta(data, path.name)


def parse_meta(data: bytes, name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The events of a meta log's bytes; bad lines are skipped and counted in the returned
    problems (one line), a line longer than MAX_META_LINE too."""
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip() or len(line) > MAX_META_LINE:
            bad += bool(line.strip())
            continue
        try:
            obj = parse_meta_line(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(obj, dict) and isinstance(obj.get("event"), str) and \
                _stamp_ok(obj.get("t")):
            events.append(clean_value(obj) if may_hold_control(line) else obj)
        else:
            bad += 1
    if bad:
        problems.append(f"{name}: {bad} unreadable meta line(s) skipped")
    return events, problems


def _stamp_ok(t: Any) -> bool:
    """A meta event's ``t`` is the writer's ``time.time_ns()`` (an int) or absent: a line
    whose ``t`` is anything else (a damaged ``{"": null}``, text, a bool) is damaged."""
    return t is None or (type(t) is int and t >= 0)


def runtime_errors(header: TraceHeader, meta: list[dict[str, Any]]) -> list[str]:
    """One line per failure of ddpdoctor's own code inside this process (meta event
    ``runtime_error``): the job went on, but its trace may end early."""
    who = f"rank {header.rank} (pid {header.pid})" if header.rank >= 0 else \
        f"pid {header.pid}"
    out = []
    for ev in meta:
        if ev.get("event") == "runtime_error":
            where = str(ev.get("where", "?"))[:100]
            error = str(ev.get("error", "?"))[:300]
            out.append(f"ddpdoctor's runtime failed on {who} in {where} ({error}); the job "
                       "went on, but this process's trace may be incomplete from then on")
    return out


class TraceFile:
    """A trace opened read-only for repeated polling (the supervisor's view of a rank)."""

    def __init__(self, ring_path: Path):
        self.path = ring_path
        fd = open_regular(ring_path)  # BadInput (exit 2) for a FIFO, a device, a link
        try:
            st = os.fstat(fd)
            if st.st_size < L.HEADER_SIZE:
                raise TraceError(f"{ring_path}: too short for a trace ({st.st_size} bytes)")
            self._map = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self._ino, self._size = st.st_ino, st.st_size
        self.header()  # validate now

    def _check_size(self) -> None:
        """Reading a mapped page the file no longer has is SIGBUS, which would kill the
        reader: refuse a file truncated in place since it was mapped.  (A file replaced
        by rename, or unlinked, keeps its old inode mapped whole.)"""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        if st.st_ino == self._ino and st.st_size < self._size:
            raise TraceError(f"{self.path}: the trace file was truncated to {st.st_size} "
                             "bytes while being read; it is no longer followed")

    def header(self) -> TraceHeader:
        self._check_size()
        return read_header(self._map, self.path)

    def tail(self, last: int, names: dict[int, str] | None = None
             ) -> tuple[TraceHeader, list[CallRecord]]:
        h = self.header()
        return h, read_records(self._map, h, last, names)[0]

    def close(self) -> None:
        self._map.close()


def meta_path_for(ring_path: Path) -> Path:
    return ring_path.with_name(ring_path.name[: -len(".ring")] + ".meta.jsonl")


def read_trace(ring_path: Path, last: int | None = None) -> RankTrace:
    """Read a trace file (only its newest ``last`` records if given: the file is mapped,
    not read whole).  Raises TraceError when the header is unusable."""
    try:
        fd = open_regular(ring_path)  # BadInput (exit 2) for a FIFO, a device, a link
    except OSError as e:
        raise TraceError(f"{ring_path}: {e.strerror or e}") from None
    try:
        size = os.fstat(fd).st_size
        if size > L.HEADER_SIZE + (1 << 24) * L.RECORD_SIZE:
            raise TraceError(f"{ring_path}: {size:,} bytes, larger than any trace ring")
        buf: Any = os.read(fd, L.HEADER_SIZE) if size < L.HEADER_SIZE else \
            mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise TraceError(f"{ring_path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    meta, problems = read_meta(meta_path_for(ring_path))
    try:
        return trace_of(buf, ring_path, meta, problems, last)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def trace_of(buf: bytes | mmap.mmap, path: Path, meta: list[dict[str, Any]],
             problems: list[str], last: int | None = None) -> RankTrace:
    """The trace in ``buf`` (a ring's bytes) with its meta events; raises TraceError when
    the header is unusable."""
    try:
        header = read_header(buf, path)
        records, dropped = read_records(buf, header, last, group_names(meta))
    except struct.error as e:
        raise TraceError(f"{path}: damaged trace ({e})") from None
    problems = problems + runtime_errors(header, meta)
    if dropped:
        problems.append(f"{path.name}: {dropped} record(s) lost to wrap-around or damage")
    return RankTrace(path, header, records, meta, dropped, problems)
