"""TraceWriter: a rank's append-only record ring (mmap) and its JSON-lines meta log."""

from __future__ import annotations

import itertools
import json
import mmap
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.host import host_name
from ddpdoctor.rundir.safe_path import CheckedDir
from ddpdoctor.trace import layout as L

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_pack_i64 = _I64.pack_into
_unpack_i64 = _I64.unpack_from
_HEADER_SIZE = L.HEADER_SIZE
_RECORD_SIZE = L.RECORD_SIZE
_OFF_COUNT = L.OFF_COUNT
_OFF_REC_T_END = L.OFF_REC_T_END


def trace_paths(trace_dir: Path, pid: int) -> tuple[Path, Path]:
    """The ring file and the meta log of process ``pid`` in ``trace_dir``."""
    return trace_dir / f"pid-{pid}.ring", trace_dir / f"pid-{pid}.meta.jsonl"


CHUNK_RECORDS = 1024  # the ring's disk is reserved this many records (256 KiB) at a time
_ZEROS = bytes(CHUNK_RECORDS * L.RECORD_SIZE)
_NEVER = 1 << 62  # an index no ring reaches: nothing left to reserve


def _reserve(fd: int, start: int, size: int) -> None:
    """Give the file the disk for bytes ``start`` to ``start + size`` now, written as zeros
    (an OSError, ENOSPC, when the disk is full).  The rest of the ring stays a hole, so a
    trace costs the disk its records take; a record is only ever written to reserved bytes,
    since a sparse page on a full disk would kill the process with SIGBUS at its first
    record.  Zeros rather than ``posix_fallocate``: a record's first write to a fallocated
    (unwritten) page makes ext4 convert the extent inside the page fault, ~40 us a page in
    a training step (~3 us a record), where a written page costs one cheap fault; a chunk
    of zeros takes ~0.1 ms, once per CHUNK_RECORDS records."""
    zeros = memoryview(_ZEROS)
    end = start + size
    while start < end:
        start += os.pwrite(fd, zeros[: min(end - start, len(zeros))], start)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass  # never created, or the run dir is gone


class TraceWriter:
    """Writes one process's trace.  Thread-safe under the GIL: each call is one C-level
    ``pack_into`` on the shared mapping, and slot indices come from an atomic counter.

    The file has the ring's full size from the start but is sparse: its disk is reserved a
    chunk at a time, half a chunk ahead of the writer (``_grow``).  When the disk is full
    the records stop at the last reserved slot: ``on_full`` is called once (the recorder
    turns recording off and says so), and the job runs on."""

    def __init__(self, trace_dir: Path, run_id: str = "", capacity: int = L.DEFAULT_CAPACITY,
                 on_full: Callable[[OSError], None] | None = None):
        self.pid = os.getpid()
        self.ring_path, self.meta_path = trace_paths(trace_dir, self.pid)
        self.capacity = capacity
        size = L.HEADER_SIZE + capacity * L.RECORD_SIZE
        # Built under a temporary name and renamed once the header is in: a reader never
        # sees a ring file without its header.
        # Every file is made relative to the trace dir's checked descriptor (safe_path).
        tmp_name = self.ring_path.name + ".tmp"
        folder = CheckedDir(trace_dir)
        try:
            fd = folder.open_new(tmp_name, os.O_RDWR)
            try:
                self._reserved = min(capacity, CHUNK_RECORDS)  # records whose disk is reserved
                os.ftruncate(fd, size)
                _reserve(fd, 0, L.HEADER_SIZE + self._reserved * L.RECORD_SIZE)
                self._map = mmap.mmap(fd, size, mmap.MAP_SHARED,
                                      mmap.PROT_READ | mmap.PROT_WRITE)
            except BaseException:
                os.close(fd)
                folder.unlink(tmp_name)
                raise
            self._fd = fd  # kept for the next chunks (close-on-exec: open_new)
            self._grow_at = self._next_grow()
            self._growing = threading.Lock()
            self._on_full = on_full
            self.full = False
            self._init_header(capacity, run_id)
            folder.replace(tmp_name, self.ring_path.name)
            self._meta_fd = folder.open_append(self.meta_path.name)
        finally:
            folder.close()
        self._next = itertools.count()
        self._pack = L.RECORD.pack_into
        self.closed = False

    def _init_header(self, capacity: int, run_id: str) -> None:
        now = time.time_ns()
        host = host_name().encode()[:64]
        L.HEADER.pack_into(
            self._map, 0, L.MAGIC, L.VERSION, L.RECORD_SIZE, capacity, self.pid, -1, -1, -1,
            int(L.RankState.STARTING), -1 << 31, -1, -1, 0, now, -1, now, host,
            run_id.encode()[:32],
        )

    # -- records ---------------------------------------------------------------------
    def append(self, kind: int, op: int, reduce_op: int, flags: int, group: int, seq: int,
               t_start: int, t_end: int, numel: int, peer: int, aux: int, nbytes: int,
               parent: int, text: bytes) -> int:
        """Write one record and return its index (pass it to ``set_end``); -1 when the
        disk is full and the record has no reserved slot."""
        index = next(self._next)
        if index >= self._grow_at and not self._grow(index):
            return -1
        off = _HEADER_SIZE + (index % self.capacity) * _RECORD_SIZE
        m = self._map
        self._pack(m, off, 0, kind, op, reduce_op, flags, group, seq, t_start, t_end,
                   numel, peer, aux, nbytes, parent, text)
        _pack_i64(m, off, index + 1)  # commit last: the record is whole
        _pack_i64(m, _OFF_COUNT, index + 1)
        return index

    def _next_grow(self) -> int:
        """The index at which the next chunk is reserved: half a chunk before the records
        run out of reserved slots (never, once the whole ring is)."""
        if self._reserved >= self.capacity:
            return _NEVER
        return self._reserved - CHUNK_RECORDS // 2

    def _grow(self, index: int) -> bool:
        """Reserve the next chunks up to past ``index``; is record ``index``'s slot
        reserved?  On a full disk (or any failure to reserve) ``on_full`` is told once and
        no further chunk is tried."""
        with self._growing:
            while index >= self._grow_at and not self.full:
                start = self._reserved
                end = min(start + CHUNK_RECORDS, self.capacity)
                try:
                    _reserve(self._fd, _HEADER_SIZE + start * _RECORD_SIZE,
                             (end - start) * _RECORD_SIZE)
                except OSError as e:
                    self.full = True
                    if self._on_full is not None:
                        self._on_full(e)
                    break
                self._reserved = end
                self._grow_at = self._next_grow()
            return index < self._reserved

    def set_end(self, index: int, t_end: int, failed: bool = False) -> None:
        """Mark record ``index`` finished at ``t_end`` (if the ring has not reused it; -1,
        a record the full disk dropped, is no slot: never read, a hole may be unbacked)."""
        if index < 0:
            return
        off = _HEADER_SIZE + (index % self.capacity) * _RECORD_SIZE
        m = self._map
        if _unpack_i64(m, off)[0] != index + 1:
            return
        _pack_i64(m, off + _OFF_REC_T_END, t_end)
        if failed:
            m[off + 11] = m[off + 11] | int(L.RecordFlag.FAILED)

    # -- header ----------------------------------------------------------------------
    def set_identity(self, rank: int, world_size: int, local_rank: int) -> None:
        _I32.pack_into(self._map, L.OFF_RANK, rank)
        _I32.pack_into(self._map, L.OFF_WORLD, world_size)
        _I32.pack_into(self._map, L.OFF_LOCAL_RANK, local_rank)

    def set_state(self, state: L.RankState) -> None:
        _I32.pack_into(self._map, L.OFF_STATE, int(state))

    def set_exit_code(self, code: int) -> None:
        _I32.pack_into(self._map, L.OFF_EXIT_CODE, code)

    def set_step(self, step: int) -> None:
        _I64.pack_into(self._map, L.OFF_STEP, step)

    def set_epoch(self, epoch: int) -> None:
        _I64.pack_into(self._map, L.OFF_EPOCH, epoch)

    def set_heartbeat(self, t_ns: int) -> None:
        _I64.pack_into(self._map, L.OFF_HEARTBEAT, t_ns)

    def set_last_seq(self, seq: int) -> None:
        _I64.pack_into(self._map, L.OFF_LAST_SEQ, seq)

    def loader_table(self) -> memoryview:
        """The header's loader-progress slots as int64s, four a slot (loader, epoch,
        batches, last batch ns; see ``layout.OFF_LOADERS``): the data probes count a batch
        with one item store.  Writes through it land in the shared mapping at once."""
        return memoryview(self._map)[L.OFF_LOADERS:L.HEADER_USED].cast("q")

    # -- meta log --------------------------------------------------------------------
    def meta(self, event: str, **fields: Any) -> None:
        """Append one JSON line ``{"event": ..., "t": ns, ...}``; one write(2), so it is
        on disk (in the page cache) the moment this returns."""
        fields["event"] = event
        fields["t"] = time.time_ns()
        line = json.dumps(fields, default=str, ensure_ascii=True) + "\n"
        os.write(self._meta_fd, line.encode())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._map.flush()
        finally:
            os.close(self._meta_fd)
            os.close(self._fd)
