"""The trace format: what the writer puts in, the reader gets back, even after damage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import (TraceError, TraceFile, format_shapes, parse_shapes,
                                    read_trace)
from ddpdoctor.trace.writer import CHUNK_RECORDS, TraceWriter

ROOT = Path(__file__).resolve().parents[2]


def write_records(tmp_path: Path, n: int, capacity: int = 64) -> TraceWriter:
    w = TraceWriter(tmp_path, "run-1", capacity=capacity)
    w.set_identity(3, 4, 1)
    for i in range(n):
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, i,
                     1000 + i, 0, 10, -1, 0, 0, -1, b"10|-|float32|/x/train.py:42")
        if i < n - 1:
            w.set_end(h, 2000 + i)
    w.meta("group", index=0, name="0", ranks=[0, 1, 2, 3])
    return w


def test_round_trip(tmp_path):
    w = write_records(tmp_path, 5)
    trace = read_trace(w.ring_path)
    assert trace.header.rank == 3 and trace.header.world_size == 4
    assert trace.header.pid == os.getpid() and trace.header.run_id == "run-1"
    assert [r.seq for r in trace.records] == [0, 1, 2, 3, 4]
    last = trace.records[-1]
    assert last.open and not trace.records[0].open
    assert last.op == "all_reduce" and last.reduce_op == "sum"
    assert last.in_shapes == ((10,),) and last.out_shapes == ((),)
    assert last.dtypes == ("float32",) and last.callsite == "/x/train.py:42"
    assert trace.groups()[0]["ranks"] == [0, 1, 2, 3]
    assert oct(w.ring_path.stat().st_mode & 0o777) == "0o600"


def test_ring_wraps_and_says_what_it_lost(tmp_path):
    w = write_records(tmp_path, 100, capacity=16)
    trace = read_trace(w.ring_path)
    assert [r.seq for r in trace.records] == list(range(84, 100))
    assert trace.dropped == 84
    assert any("lost" in p for p in trace.problems)


def test_records_survive_without_close(tmp_path):
    w = write_records(tmp_path, 3)  # never closed or flushed: as after SIGKILL
    data = w.ring_path.read_bytes()
    assert len(data) == L.HEADER_SIZE + 64 * L.RECORD_SIZE
    assert len(read_trace(w.ring_path).records) == 3


def _disk(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_a_ring_costs_the_disk_its_records_take_reserved_ahead_of_them(tmp_path):
    """Sparse past the records: the disk is reserved a chunk at a time, half a chunk ahead
    of the writer (a record never lands on a hole: on a full disk that is SIGBUS)."""
    chunk = CHUNK_RECORDS * L.RECORD_SIZE
    w = TraceWriter(tmp_path, "run-1", capacity=5000)
    assert w.ring_path.stat().st_size == L.HEADER_SIZE + 5000 * L.RECORD_SIZE
    first = _disk(w.ring_path)
    assert L.HEADER_SIZE + chunk <= first < L.HEADER_SIZE + chunk + 64 * 1024
    write_more(w, CHUNK_RECORDS // 2)
    assert _disk(w.ring_path) == first  # still inside the first chunk's first half
    write_more(w, 1)
    assert _disk(w.ring_path) == first + chunk  # the next chunk, before it is needed
    write_more(w, 2000)
    assert first + 2 * chunk <= _disk(w.ring_path) <= first + 3 * chunk
    write_more(w, 6000)  # wrapped: the whole ring, never more
    assert _disk(w.ring_path) <= L.HEADER_SIZE + 5000 * L.RECORD_SIZE + 64 * 1024
    assert len(read_trace(w.ring_path).records) == 5000


def write_more(w: TraceWriter, n: int) -> None:
    for i in range(n):
        assert w.append(int(L.RecordKind.MARK), 0, 0, 0, 0, i, 1, 1, 0, -1, 0, 0, -1, b"") >= 0


FULL_DISK = """
import os, subprocess, sys, tempfile
from pathlib import Path
sys.path.insert(0, {root!r})
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace
from ddpdoctor.trace.writer import CHUNK_RECORDS, TraceWriter
fs = Path(tempfile.mkdtemp())
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(fs)], check=True)
told = []
w = TraceWriter(fs, "run-1", on_full=told.append)  # 8 MiB of ring, 300 KiB of disk
handles = [w.append(int(L.RecordKind.MARK), 0, 0, 0, 0, i, 1, 0, 0, -1, 0, 0, -1, b"x")
           for i in range(5 * CHUNK_RECORDS)]  # a sparse page written here: SIGBUS
for h in handles:
    w.set_end(h, 2)
kept = [h for h in handles if h >= 0]
print(w.full, len(told), told[0].strerror, len(kept), kept == list(range(len(kept))),
      len(read_trace(w.ring_path).records))
"""


def test_a_full_disk_stops_the_records_at_the_reserved_slots_never_sigbus(tmp_path):
    """On a tmpfs of 300 KiB (a mount namespace of its own): the first chunk fits, the next
    does not; the writer says so once and drops the records past the reserved slots."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare to mount a small tmpfs")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           "-c", FULL_DISK.format(root=str(ROOT))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7: SIGBUS
    assert done.stdout.split() == ["True", "1", "No", "space", "left", "on", "device",
                                   str(CHUNK_RECORDS), "True", str(CHUNK_RECORDS)], done.stdout


def test_torn_record_is_skipped(tmp_path):
    w = write_records(tmp_path, 3)
    with open(w.ring_path, "r+b") as f:  # the commit of record 1 never landed
        f.seek(L.HEADER_SIZE + L.RECORD_SIZE)
        f.write(b"\0" * 8)
    trace = read_trace(w.ring_path)
    assert [r.seq for r in trace.records] == [0, 2]
    assert trace.dropped == 1


@pytest.mark.parametrize("damage", [b"", b"junk" * 10, b"\0" * L.HEADER_SIZE])
def test_damaged_header_is_a_clear_error(tmp_path, damage):
    path = tmp_path / "pid-1.ring"
    path.write_bytes(damage)
    with pytest.raises(TraceError, match="pid-1.ring"):
        read_trace(path)


def test_truncated_ring_keeps_what_is_there(tmp_path):
    w = write_records(tmp_path, 10)
    data = w.ring_path.read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / w.ring_path.name).write_bytes(data[: L.HEADER_SIZE + 4 * L.RECORD_SIZE + 17])
    trace = read_trace(cut / w.ring_path.name)
    assert [r.seq for r in trace.records] == [0, 1, 2, 3]


def test_bad_meta_lines_are_counted_not_fatal(tmp_path):
    w = write_records(tmp_path, 1)
    with open(w.meta_path, "ab") as f:
        f.write(b"{not json\n\xff\xfe\n[1, 2]\n")
    trace = read_trace(w.ring_path)
    assert trace.groups()[0]["name"] == "0"
    assert any("3 unreadable" in p for p in trace.problems)


def test_live_file_sees_new_records(tmp_path):
    w = write_records(tmp_path, 2)
    live = TraceFile(w.ring_path)
    assert live.header().count == 2
    w.append(1, 1, 0, 0, 0, 2, 5, 0, 1, -1, 0, 0, -1, b"")
    header, tail = live.tail(8)
    assert header.count == 3 and tail[-1].seq == 2


@pytest.mark.parametrize("shapes", [[(10,)], [(3, 4), ()], [], [(1, 2, 3), (0,)]])
def test_shapes_text_round_trip(shapes):
    assert parse_shapes(format_shapes(shapes)) == tuple(shapes)
