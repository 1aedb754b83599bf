"""find_divergences_fast: the first mismatching collective of each process group, for jobs
too big to decode into Python objects (1,000+ ranks, 10,000+ collectives each).

The records of each rank are read with numpy in one piece and compared, seq by seq, with
a reference row per seq (the first rank that recorded that seq) on the bytes that make a
collective's fingerprint: op, reduce op, peer and the text's shapes and dtypes.  Only rows
whose bytes differ are decoded (their call sites stripped first), and only their
fingerprints (``matcher.fingerprint``, cached by text) decide.  The first divergent seq of
a group is the smallest seq at which any rank's fingerprint differs from the reference;
the calls of every rank at that seq are then decoded into ``Call``s and handed to
``matcher.find_divergence``, so blame and match state are exactly the slow path's.

Memory: one rank's records at a time, plus per group a reference of 200 bytes a seq and
per rank 12 bytes a collective.  ``Recorder``/``TraceWriter`` layout: see trace/layout.py.
"""

from __future__ import annotations

import os

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from ddpdoctor.analysis.load.trace_words import (WORDS, Buffer, RankFile, group_names, load_words,
                                           meta_group_names, rank_files, tail_trace)
from ddpdoctor.analysis.align.matcher import Divergence, find_divergence, fingerprint
from ddpdoctor.analysis.model import Call
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import RankTrace, decode_record, meta_path_for, read_meta
from ddpdoctor.rundir.bounded import open_regular

_W_OPS, _W_SEQ, _W_PEER, _W_TEXT = 1, 2, 6, 9  # word 1: kind, op, reduce op, flags, group
_OPS_MASK = np.uint64(0x0000_0000_00FF_FFFF)  # kind, op, reduce op (not flags, not group)
_PEER_MASK = np.uint64(0x0000_0000_FFFF_FFFF)  # peer (not aux)
KEY_WORDS = 2 + (WORDS - _W_TEXT)  # ops, peer, 23 words of text
MAX_SEQ_SPAN = 1 << 20  # seqs of one group farther apart than this are not compared
_PIPE = ord("|")

assert (WORDS - _W_TEXT) * 8 == L.TEXT_SIZE


@dataclass
class _Reference:
    """Per group: the record of the first rank seen at each seq in [lo, lo + len), as
    32 words a row (only the key words are compared)."""

    lo: int
    rows: np.ndarray  # (span, WORDS) uint64
    has: np.ndarray  # (span,) bool

    def cover(self, seqs_lo: int, seqs_hi: int) -> None:
        """Grow to cover [seqs_lo, seqs_hi), at most MAX_SEQ_SPAN seqs (the rest is not
        compared)."""
        cur_lo, cur_hi = self.lo, self.lo + len(self.has)
        lo, hi = seqs_lo, seqs_hi
        if cur_hi > cur_lo:
            lo, hi = min(lo, cur_lo), max(hi, cur_hi)
            if hi - lo > MAX_SEQ_SPAN:  # keep what is there, grow towards the new seqs
                lo = max(lo, min(cur_lo, cur_hi - MAX_SEQ_SPAN))
                hi = min(hi, lo + MAX_SEQ_SPAN)
        else:
            hi = min(hi, lo + MAX_SEQ_SPAN)
        if (lo, hi) == (cur_lo, cur_hi):
            return
        rows = np.zeros((hi - lo, WORDS), np.uint64)
        has = np.zeros(hi - lo, bool)
        o_lo, o_hi = max(lo, cur_lo), min(hi, cur_hi)
        if o_hi > o_lo:
            rows[o_lo - lo:o_hi - lo] = self.rows[o_lo - cur_lo:o_hi - cur_lo]
            has[o_lo - lo:o_hi - lo] = self.has[o_lo - cur_lo:o_hi - cur_lo]
        self.lo, self.rows, self.has = lo, rows, has



@dataclass
class FastScan:
    """What ``scan`` found: the first divergence of each group and what could not be read."""

    divergences: list[Divergence]
    ranks: int
    collectives: int
    problems: list[str]
    traces: dict[Path, RankTrace] = field(default_factory=dict)
    """With ``tail``: per trace file, the rank as ``read_trace(path, tail)`` reads it, plus
    the newest collective of each of its groups (a tail may hold only one group's)."""




def _key_columns(rows: np.ndarray) -> np.ndarray:
    keys = np.empty((len(rows), KEY_WORDS), np.uint64)
    keys[:, 0] = rows[:, _W_OPS] & _OPS_MASK
    keys[:, 1] = rows[:, _W_PEER] & _PEER_MASK
    keys[:, 2:] = rows[:, _W_TEXT:]
    return keys


def _same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Do two (n, 32) row blocks agree on every key word?"""
    return (np.array_equal(a[:, _W_TEXT:], b[:, _W_TEXT:])
            and not ((a[:, _W_OPS] ^ b[:, _W_OPS]) & _OPS_MASK).any()
            and not ((a[:, _W_PEER] ^ b[:, _W_PEER]) & _PEER_MASK).any())


def _strip_callsites(keys: np.ndarray) -> np.ndarray:
    """Key rows with the text's call site (after its third ``|``) zeroed."""
    text = keys[:, 2:].copy().view(np.uint8).reshape(len(keys), L.TEXT_SIZE)
    after = np.cumsum(text == _PIPE, axis=1) >= 3
    text[after] = 0
    out = keys.copy()
    out[:, 2:] = text.view(np.uint64).reshape(len(keys), KEY_WORDS - 2)
    return out


class _Fingerprints:
    """matcher.fingerprint of a key row, decoded once per distinct row."""

    def __init__(self) -> None:
        self._cache: dict[bytes, tuple] = {}

    def of(self, key: np.ndarray) -> tuple:
        raw = key.tobytes()
        fp = self._cache.get(raw)
        if fp is None:
            fp = fingerprint(_key_call(raw))
            self._cache[raw] = fp
        return fp


def _key_call(raw: bytes) -> Call:
    """A Call holding just what a fingerprint needs, from a key row's bytes."""
    record = bytearray(L.RECORD_SIZE)
    record[0:8] = (1).to_bytes(8, "little")  # commit of index 0
    record[8:11] = raw[0:3]  # kind, op, reduce op
    record[48:52] = raw[8:12]  # peer
    record[72:] = raw[16:]
    rec = decode_record(bytes(record), 0, 0)
    if rec is None:  # an unknown kind cannot happen for a collective row; be safe
        return Call(op="unknown", group="")
    return rec


def _row_hashes(keys: np.ndarray) -> np.ndarray:
    """A 64-bit mixing hash of each key row (only to group equal rows; equality is then
    checked exactly)."""
    h = np.full(len(keys), 0x9E3779B97F4A7C15, np.uint64)
    mul, shift = np.uint64(0xBF58476D1CE4E5B9), np.uint64(31)
    for j in range(keys.shape[1]):
        h ^= keys[:, j]
        h *= mul
        h ^= h >> shift
    return h


def _first_difference(rows: np.ndarray, theirs: np.ndarray, seqs: np.ndarray,
                      prints: _Fingerprints) -> int | None:
    """The smallest seq at which ``rows`` and the reference rows ``theirs`` (aligned)
    have differing fingerprints."""
    mine_k, theirs_k = _key_columns(rows), _key_columns(theirs)
    differ = np.flatnonzero((mine_k != theirs_k).any(axis=1))
    if differ.size == 0:
        return None
    mine_k, theirs_k, seqs = mine_k[differ], theirs_k[differ], seqs[differ]
    # Training loops repeat: decide once per distinct (mine, theirs) pair of rows.
    pairs = _row_hashes(mine_k) * np.uint64(0x94D049BB133111EB) ^ _row_hashes(theirs_k)
    _, rep, inverse = np.unique(pairs, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    exact = (mine_k == mine_k[rep][inverse]).all(axis=1) & \
        (theirs_k == theirs_k[rep][inverse]).all(axis=1)
    mine_s, theirs_s = _strip_callsites(mine_k[rep]), _strip_callsites(theirs_k[rep])
    pair_differs = np.array([prints.of(a) != prints.of(b) for a, b in zip(mine_s, theirs_s)],
                            dtype=bool)
    hits = list(seqs[exact & pair_differs[inverse]].tolist())
    for i in np.flatnonzero(~exact):  # a hash collision: decide this row on its own
        a, b = _strip_callsites(mine_k[i:i + 1])[0], _strip_callsites(theirs_k[i:i + 1])[0]
        if prints.of(a) != prints.of(b):
            hits.append(int(seqs[i]))
    return int(min(hits)) if hits else None


def _compare_run(rows: np.ndarray, seq0: int, ref: _Reference,
                 prints: _Fingerprints) -> int | None:
    """Contiguous seqs seq0..seq0+n-1 (the usual case): slices, no gathers."""
    n = len(rows)
    a = seq0 - ref.lo
    b = a + n
    if a < 0 or b > len(ref.has):
        seqs = np.arange(seq0, seq0 + n, dtype=np.int64)
        return _compare_rows(rows, seqs, ref, prints)
    has = ref.has[a:b]
    if not has.any():
        ref.rows[a:b] = rows
        has[:] = True
        return None
    if has.all():
        theirs = ref.rows[a:b]
        if _same_rows(rows, theirs):
            return None
        return _first_difference(rows, theirs, np.arange(seq0, seq0 + n, dtype=np.int64),
                                 prints)
    return _compare_rows(rows, np.arange(seq0, seq0 + n, dtype=np.int64), ref, prints)


def _compare_rows(rows: np.ndarray, seqs: np.ndarray, ref: _Reference,
                  prints: _Fingerprints) -> int | None:
    """Any seqs: fill the reference where it has no row yet, compare the rest."""
    off = seqs - ref.lo
    inside = (off >= 0) & (off < len(ref.has))
    if not inside.all():
        off, seqs, rows = off[inside], seqs[inside], rows[inside]
    known = ref.has[off]
    new = ~known
    ref.rows[off[new]] = rows[new]
    ref.has[off[new]] = True
    if not known.any():
        return None
    return _first_difference(rows[known], ref.rows[off[known]], seqs[known], prints)


def _scan_rank(rf: RankFile, buf: Buffer, refs: dict[str, _Reference],
               prints: _Fingerprints, first: dict[str, int], problems: list[str],
               tail: int | None = None) -> tuple[int, RankTrace | None]:
    """Compare one rank with the references; returns how many collectives it has, and
    with ``tail`` its newest records and meta log (see FastScan.traces)."""
    words, slots = load_words(rf, buf)
    meta: list[dict] = []
    if tail is not None:
        meta, meta_problems = read_meta(meta_path_for(rf.path))
        names = meta_group_names(meta)
    if not len(words):
        return 0, (tail_trace(rf, buf.last, tail, [], meta, meta_problems)
                   if tail is not None else None)
    if tail is None:
        names = group_names(rf.path, problems)
    newest_slots = []
    w1 = words[:, _W_OPS]
    local = (w1 >> np.uint64(32)).astype(np.int64)
    local = np.where(local >= 1 << 31, local - (1 << 32), local)
    single = local[0] == local[-1] and (local == local[0]).all()
    for g in ([int(local[0])] if single else np.unique(local).tolist()):
        name = names.get(g, str(g))
        if single:
            rows, g_slots = words, slots
        else:
            mask = local == g
            rows = words[mask]
            g_slots = (slots if slots is not None else buf.arange(len(words)))[mask]
        seqs = rows[:, _W_SEQ].view(np.int64)
        seq0, n = int(seqs[0]), len(rows)
        contiguous = int(seqs[-1]) == seq0 + n - 1 and (
            n < 2 or bool((np.diff(seqs) == 1).all()))
        ref = refs.get(name)
        if ref is None:
            ref = refs[name] = _Reference(seq0, np.zeros((0, WORDS), np.uint64),
                                          np.zeros(0, bool))
        if contiguous:
            ref.cover(seq0, seq0 + n)
            at = _compare_run(rows, seq0, ref, prints)
        else:
            ref.cover(int(seqs.min()), int(seqs.max()) + 1)
            at = _compare_rows(rows, seqs.copy(), ref, prints)
        if contiguous and g_slots is None:
            rf.runs[name] = (seq0, 0, n)
        else:
            rf.seqs[name] = seqs.copy()
            rf.slots[name] = (g_slots if g_slots is not None else
                              buf.arange(n)).astype(np.int32)
        if at is not None and at < first.get(name, at + 1):
            first[name] = at
        newest = int(np.argmax(seqs))
        newest_slots.append(int(g_slots[newest]) if g_slots is not None else newest)
    if tail is None:
        return len(words), None
    cap, count = rf.header.capacity, rf.header.count
    oldest = max(0, count - cap)
    newest_calls = [oldest + (s - oldest % cap) % cap for s in newest_slots]
    return len(words), tail_trace(rf, buf.last, tail, newest_calls, meta, meta_problems)


def _call_at(rf: RankFile, group: str, seq: int) -> Call | None:
    slot = rf.slot_of(group, seq)
    if slot is None:
        return None
    h = rf.header
    first = max(0, h.count - h.capacity)
    index = first + (slot - first % h.capacity) % h.capacity
    fd = open_regular(rf.path)  # a FIFO swapped in meanwhile: BadInput, never a hang
    try:
        raw = os.pread(fd, L.RECORD_SIZE, L.HEADER_SIZE + slot * L.RECORD_SIZE)
    finally:
        os.close(fd)
    if len(raw) < L.RECORD_SIZE:
        return None
    rec = decode_record(raw, 0, index, h.rank)
    return replace(rec, group=group) if rec is not None else None


def scan(run_dirs: list[Path], tail: int | None = None) -> FastScan:
    """Compare every rank's collectives in ``run_dirs`` (one per node); see the module doc.
    With ``tail``, also keep each rank's newest records and meta log (FastScan.traces),
    read in the same pass."""
    problems: list[str] = []
    files = rank_files([Path(d) for d in run_dirs], problems)
    refs: dict[str, _Reference] = {}
    first: dict[str, int] = {}
    prints = _Fingerprints()
    buf = Buffer()
    total = 0
    traces: dict[Path, RankTrace] = {}
    for rf in files:
        try:
            n, trace = _scan_rank(rf, buf, refs, prints, first, problems, tail)
        except (OSError, ValueError) as e:
            problems.append(f"{rf.path}: unreadable ({e})")
            continue
        total += n
        if trace is not None:
            traces[rf.path] = trace
    del refs
    divergences = []
    for name, seq in sorted(first.items()):
        calls = {}
        for rf in files:
            try:
                call = _call_at(rf, name, seq)
            except OSError:
                call = None
            if call is not None:
                calls[rf.header.rank] = call
        div = find_divergence({r: [c] for r, c in calls.items()}, name, seq)
        if div is not None:
            divergences.append(div)
    return FastScan(divergences, len(files), total, problems, traces)


_SCANNED: dict[tuple[str, ...], FastScan] = {}  # scans in use by a report being built


@contextmanager
def scanned(run_dirs: list[Path], tail: int | None = None) -> Iterator[FastScan]:
    """Scan ``run_dirs`` once: inside the block, ``find_divergences_fast`` of the same
    dirs answers from this scan (a report reads the traces once, not twice)."""
    key = tuple(str(d) for d in run_dirs)
    found = _SCANNED[key] = scan(run_dirs, tail)
    try:
        yield found
    finally:
        _SCANNED.pop(key, None)


def find_divergences_fast(run_dirs: list[Path]) -> list[Divergence]:
    """The first divergence of each process group across the run dirs' ranks, as
    ``matcher.find_divergence`` would find it, without decoding every record."""
    found = _SCANNED.get(tuple(str(d) for d in run_dirs))
    return (found if found is not None else scan(run_dirs)).divergences
