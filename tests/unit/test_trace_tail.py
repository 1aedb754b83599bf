"""TraceTail, the incremental reader the supervisor and the live TUI share, over traces
written by the project's own TraceWriter."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import TraceFile
from ddpdoctor.trace.tail import TraceTail
from ddpdoctor.trace.writer import TraceWriter

_TEXT = b"10|-|float32|/x/train.py:42"
_CALLS = (int(L.RecordKind.COLLECTIVE), int(L.RecordKind.P2P))


def _call(w: TraceWriter, seq: int, group: int = 0, t_end: int = 0,
          kind: L.RecordKind = L.RecordKind.COLLECTIVE) -> int:
    """Append an all_reduce (open unless ``t_end``); its record index."""
    return w.append(int(kind), L.OP_CODES["all_reduce"], 1, 0, group, seq, 1000 + seq,
                    t_end, 10, -1, 0, 40, -1, _TEXT)


@pytest.fixture
def writer(tmp_path: Path):
    """Makes the test's one trace (a ring of ``capacity`` records) in tmp_path/traces."""
    made: list[TraceWriter] = []

    def make(capacity: int = 64) -> TraceWriter:
        (tmp_path / "traces").mkdir()
        made.append(TraceWriter(tmp_path / "traces", "run-1", capacity=capacity))
        return made[0]

    yield make
    for w in made:
        w.close()


def _new(tail: TraceTail, kinds: tuple[int, ...] = _CALLS) -> list[int]:
    """The header read again, then the indexes of the new records of ``kinds``."""
    tail.refresh()
    return [index for index, _ in tail.new_records(kinds)]


def test_new_records_are_read_once(writer) -> None:
    w = writer()
    tail = TraceTail(TraceFile(w.ring_path))
    for seq in range(3):
        _call(w, seq, t_end=2000 + seq)
    assert tail.grew()
    tail.refresh()
    got = [(index, v[6]) for index, v in tail.new_records(_CALLS)]
    assert got == [(0, 0), (1, 1), (2, 2)]
    assert tail.read_upto == 3 and not tail.grew()
    assert _new(tail) == []  # nothing appended since: nothing again
    w.append(int(L.RecordKind.BATCH), L.OP_CODES["batch"], 0, 0, 0, 0, 1, 2, 0, -1, 0, 0, -1,
             b"")  # a kind not asked for
    _call(w, 3, t_end=2003)
    assert _new(tail) == [4]
    assert tail.read_upto == 5


def test_at_most_max_new_records_are_read_a_poll(writer) -> None:
    w = writer()
    for seq in range(20):
        _call(w, seq, t_end=1)
    tail = TraceTail(TraceFile(w.ring_path), max_new=5)
    assert _new(tail) == [15, 16, 17, 18, 19]
    assert tail.read_upto == 20


def test_an_open_call_is_returned_once_its_end_is_written(writer) -> None:
    w = writer()
    tail = TraceTail(TraceFile(w.ring_path))
    index = _call(w, 0)
    tail.refresh()
    (got, v), = tail.new_records(_CALLS)
    assert got == index and v[8] == 0  # no end time yet
    tail.open[index] = "the call"
    assert tail.returned() == []  # still inside it
    assert tail.open == {index: "the call"}
    w.set_end(index, 5_000)
    assert tail.returned() == [("the call", 5_000)]
    assert tail.open == {}
    assert tail.returned() == []  # reported once


def test_an_overwritten_slot_is_dropped(writer) -> None:
    w = writer(capacity=4)
    tail = TraceTail(TraceFile(w.ring_path))
    first = _call(w, 0)
    assert _new(tail) == [first]
    tail.open[first] = "never returned"
    for seq in range(1, 5):  # record 4 takes slot 0 of the 4: the open record is gone
        _call(w, seq, t_end=1)
    assert tail.returned() == [("never returned", 0)]
    assert tail.open == {}
    tail.refresh()  # the header says 5; then two more overwrite records 1 and 2
    _call(w, 5, t_end=1)
    _call(w, 6, t_end=1)
    assert [index for index, _ in tail.new_records(_CALLS)] == [3, 4]
    assert tail.read_upto == 5


def test_a_truncated_file_does_not_raise(writer, tmp_path: Path) -> None:
    w = writer(capacity=8)
    for seq in range(6):
        _call(w, seq, t_end=1)
    short = tmp_path / "copy" / "pid-1.ring"
    short.parent.mkdir()
    shutil.copyfile(w.ring_path, short)
    with open(short, "r+b") as f:  # three whole slots and half of the fourth are left
        f.truncate(L.HEADER_SIZE + 3 * L.RECORD_SIZE + L.RECORD_SIZE // 2)
    tail = TraceTail(TraceFile(short))
    assert tail.slots() == 3
    assert _new(tail) == [0, 1, 2]
    assert tail.read_upto == 6
    assert tail.group(0) == "0"  # no meta file next to the copy


def test_group_names_come_from_the_meta_file(writer) -> None:
    w = writer()
    w.meta("group", index=0, name="default", ranks=[0, 1])
    w.meta("group", index=1, name="tp", ranks=[1])
    tail = TraceTail(TraceFile(w.ring_path))
    assert tail.group(1) == "tp"
    assert tail.groups == {0: "default", 1: "tp"}
    assert tail.group_ranks == {"default": [0, 1], "tp": [1]}
    assert tail.group(7) == "7"  # a group the meta log does not name
    w.meta("group", index=2, name="late", ranks=[0])
    assert tail.group(2) == "late"  # an index not seen yet reads the meta log again
