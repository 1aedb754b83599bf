"""Recorder: the per-process recording API that patched calls and ddpdoctor's DDP use.

``active()`` returns the process's Recorder when it runs under ``ddpdoctor run`` (the
trace file is created on first use), else None.  Every public method is safe to call from
any thread and never raises: a failure inside the recorder disables it and is noted in
the meta log, so a bug in ddpdoctor degrades to "no diagnosis", never to a crash.
"""

from __future__ import annotations

import os
import sys
import struct
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import format_shapes
from ddpdoctor.trace.writer import TraceWriter

ENV_RUN_DIR = "DDPDOCTOR_RUN_DIR"
ENV_RUN_ID = "DDPDOCTOR_RUN_ID"
ENV_TEST_FAULT = "DDPDOCTOR_TEST_FAULT"  # tests only: "begin[:N][@RANK]", see _TestFault

_time_ns = time.time_ns
_OP = L.OP_CODES
_KIND_COLL = int(L.RecordKind.COLLECTIVE)
_KIND_P2P = int(L.RecordKind.P2P)
_KIND_RING = int(L.RecordKind.RING_STEP)
_COMPUTING = L.RankState.COMPUTING

_COMMIT_AND_SEQ = struct.Struct("<q8xq")  # a record's commit and seq fields
HEARTBEAT_EVERY_NS = 500_000_000  # the header's heartbeat_ns is refreshed at most this often
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_internal_code: dict[Any, bool] = {}
_REDUCE_CODES = {name: i for i, name in enumerate(L.REDUCE_OPS)}


def _is_internal(code: Any) -> bool:
    """Is this code object torch's, ddpdoctor's or the stdlib's (not the user's)?"""
    hit = _internal_code.get(code)
    if hit is None:
        fn = code.co_filename
        hit = (
            fn.startswith(_PKG_DIR) or f"{os.sep}torch{os.sep}" in fn
            or fn.startswith("<frozen") or f"{os.sep}multiprocessing{os.sep}" in fn
            or fn.endswith(("threading.py", "contextlib.py"))
        )
        _internal_code[code] = hit
    return hit


_sites: dict[tuple[Any, int], str] = {}


def user_callsite(depth: int = 2) -> str:
    """``file:line`` of the innermost frame that belongs to the user's code.  Cached by
    (code, instruction offset): a loop calls from the same few places."""
    f = sys._getframe(depth)
    first = f
    internal = _internal_code
    while f is not None:
        hit = internal.get(f.f_code)
        if hit is None:
            hit = _is_internal(f.f_code)
        if not hit:
            break
        f = f.f_back
    if f is None:
        f = first
    key = (f.f_code, f.f_lasti)
    site = _sites.get(key)
    if site is None:
        if len(_sites) > 4096:
            _sites.clear()
        site = _sites[key] = f"{f.f_code.co_filename}:{f.f_lineno}"
    return site


def dtype_name(t: Any) -> str:
    return str(t.dtype)[6:]


_DESCRIBE_CACHE: dict[tuple, tuple[bytes, int]] = {}
_DESCRIBE_CACHE_MAX = 4096


def describe(ins: Sequence[Any], outs: Sequence[Any], callsite: str) -> tuple[bytes, int]:
    """The record text ``in_shapes|out_shapes|dtypes|callsite`` and the input numel.
    Cached by (shapes, dtypes, call site): a training loop repeats a handful of them."""
    if len(ins) == 1 and not outs:  # the common case, kept cheap
        t = ins[0]
        key: tuple = (callsite, t.shape, t.dtype)
    else:
        ins = [t for t in ins if t is not None]
        outs = [t for t in outs if t is not None]
        key = (callsite, len(ins), *[(t.shape, t.dtype) for t in ins],
               *[(t.shape, t.dtype) for t in outs])
    hit = _DESCRIBE_CACHE.get(key)
    if hit is not None:
        return hit
    ins = [t for t in ins if t is not None]
    outs = [t for t in outs if t is not None]
    numel = 0
    for t in ins:
        numel += t.numel()
    dtypes = ";".join(dtype_name(t) for t in (ins or outs)[:8])
    text = (f"{format_shapes([tuple(t.shape) for t in ins[:8]])}|"
            f"{format_shapes([tuple(t.shape) for t in outs[:8]])}|{dtypes}|{callsite}")
    raw = text.encode()
    if len(raw) > L.TEXT_SIZE:  # keep the call site, shorten the shapes
        tail = f"|{dtypes}|{callsite}".encode()[-(L.TEXT_SIZE // 2):]
        raw = raw[: L.TEXT_SIZE - len(tail)] + tail
    if len(_DESCRIBE_CACHE) >= _DESCRIBE_CACHE_MAX:
        _DESCRIBE_CACHE.clear()
    _DESCRIBE_CACHE[key] = (raw, numel)
    return raw, numel


class _TestFault:
    """A fault injected by tests through DDPDOCTOR_TEST_FAULT="where[:N][@RANK]": the Nth
    call (default the first) of ``where`` on rank RANK (default any) raises RuntimeError."""

    def __init__(self, spec: str):
        where, _, rank = spec.partition("@")
        self.where, _, nth = where.partition(":")
        self.nth = int(nth) if nth.isdigit() else 1
        self.rank = int(rank) if rank.lstrip("-").isdigit() else None
        self.calls = 0

    def check(self, where: str, rank: int) -> None:
        if where != self.where or (self.rank is not None and rank != self.rank):
            return
        self.calls += 1
        if self.calls == self.nth:
            raise RuntimeError(f"injected test fault in {where} (DDPDOCTOR_TEST_FAULT)")


def _test_fault() -> _TestFault | None:
    spec = os.environ.get(ENV_TEST_FAULT, "")
    return _TestFault(spec) if spec else None


class Recorder:
    """Records this process's collectives, p2p calls, ring steps and events."""

    def __init__(self, run_dir: Path, run_id: str = ""):
        trace_dir = run_dir / "traces"
        trace_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.run_dir = run_dir
        self.writer = TraceWriter(trace_dir, run_id)
        self.enabled = True
        self._groups: dict[int, int] = {}  # id(pg) -> local index
        self._group_objs: list[Any] = []  # keep pgs alive so ids stay unique
        self._seq: list[int] = []  # next seq per local group index
        self._p2p_seq: dict[tuple[int, int, int], int] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.rank = -1
        self.steps = 0  # optimizer steps taken (the header's step)
        self._heartbeat_due = 0  # wall time (ns) after which a record refreshes heartbeat_ns
        self._fault = _test_fault()
        from ddpdoctor.report.redact import redact_argv

        self.writer.meta("process", pid=os.getpid(), ppid=os.getppid(),
                         argv=redact_argv(sys.argv[:16]), executable=sys.executable)

    # -- failure containment ---------------------------------------------------------
    def fail(self, where: str, error: BaseException) -> None:
        """Disable recording after an internal error; the job itself goes on."""
        self.enabled = False
        self.note_error(where, error)

    def note_error(self, where: str, error: BaseException) -> None:
        """Say in the meta log that a part of ddpdoctor failed (recording goes on)."""
        try:
            self.writer.meta("runtime_error", where=where,
                             error=f"{type(error).__name__}: {error}"[:500])
        except OSError:
            pass  # the run dir is gone or full: nothing left to tell

    # -- identity and state ------------------------------------------------------------
    def set_identity(self, rank: int, world_size: int, local_rank: int) -> None:
        self.rank = rank
        self.writer.set_identity(rank, world_size, local_rank)
        self.writer.set_state(_COMPUTING)

    def set_step(self, step: int) -> None:
        self.writer.set_step(step)

    def set_epoch(self, epoch: int) -> None:
        self.writer.set_epoch(epoch)

    def meta(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        try:
            self.writer.meta(event, **fields)
        except (OSError, TypeError, ValueError) as e:
            self.fail("meta", e)

    # -- groups ------------------------------------------------------------------------
    def group_index(self, pg: Any) -> int:
        """Local index of process group ``pg`` (None = the default group)."""
        key = id(pg)
        idx = self._groups.get(key)
        if idx is not None:
            return idx
        return self._register_group(pg)

    def _register_group(self, pg: Any) -> int:
        import torch.distributed as dist

        real = pg if pg is not None else dist.distributed_c10d._get_default_group()
        with self._lock:
            idx = self._groups.get(id(real))
            if idx is None:
                idx = len(self._seq)
                self._seq.append(0)
                self._groups[id(real)] = idx
                self._group_objs.append(real)
                try:
                    ranks = dist.get_process_group_ranks(real)
                except (RuntimeError, ValueError):
                    ranks = []
                name = getattr(real, "group_name", "") or str(idx)
                self.writer.meta("group", index=idx, name=name, ranks=ranks,
                                 size=real.size(), default=pg is None)
            if pg is None:
                self._groups[id(None)] = idx
        return idx

    def heartbeat(self, now: int) -> None:
        """Write ``now`` as the header's heartbeat_ns (records call this every 0.5 s at most:
        the heartbeat is the wall time of the rank's latest recorded activity, to 0.5 s)."""
        self._heartbeat_due = now + HEARTBEAT_EVERY_NS
        self.writer.set_heartbeat(now)

    # -- collectives -------------------------------------------------------------------
    def begin(self, op: str, pg: Any, ins: Sequence[Any], outs: Sequence[Any] = (),
              reduce_op: str = "", flags: int = 0, peer: int = -1, aux: int = 0,
              callsite: str | None = None, kind: int = _KIND_COLL) -> int:
        """Record entering a collective; returns a handle for ``end`` (-1 if disabled)."""
        if not self.enabled:
            return -1
        try:
            if self._fault is not None:
                self._fault.check("begin", self.rank)
            g = self._groups.get(id(pg))
            if g is None:
                g = self._register_group(pg)
            if kind == _KIND_COLL:
                seq = self._seq[g]
                self._seq[g] = seq + 1
            else:
                key = (g, peer, flags & 48)
                seq = self._p2p_seq.get(key, 0)
                self._p2p_seq[key] = seq + 1
            text, numel = describe(ins, outs, callsite or user_callsite(3))
            now = _time_ns()
            if now >= self._heartbeat_due:
                self.heartbeat(now)
            idx = self.writer.append(kind, _OP.get(op, 0), _REDUCE_CODES.get(reduce_op, 0),
                                     flags, g, seq, now, 0, numel, peer, aux, 0, -1, text)
            return idx
        except Exception as e:  # noqa: BLE001 - any recorder bug must not reach the job
            self.fail(f"begin {op}", e)
            return -1

    def end(self, handle: int, failed: bool = False) -> None:
        """Record that the call of ``handle`` returned (or raised, ``failed``)."""
        if handle < 0 or not self.enabled:
            return
        try:
            self.writer.set_end(handle, _time_ns(), failed)
        except Exception as e:  # noqa: BLE001 - see begin
            self.fail("end", e)

    def ring_step(self, parent_seq: int, pg: Any, send: bool, peer: int, nbytes: int,
                  t_start: int, t_end: int, step: int, segment: int = 0,
                  bucket: int = -1) -> int:
        """Record one send or recv of a ring all-reduce; ``t_end`` 0 while in flight
        (then call ``end_step``).  ``step`` is the ring step, ``segment`` the chunk."""
        if not self.enabled:
            return -1
        try:
            g = self.group_index(pg)
            flags = int(L.RecordFlag.SEND if send else L.RecordFlag.RECV)
            text = f"|||bucket {bucket} segment {segment}".encode()
            return self.writer.append(
                _KIND_RING, _OP["ring_send" if send else "ring_recv"], 0, flags, g,
                step, t_start, t_end, nbytes // 4, peer, segment, nbytes, parent_seq, text)
        except Exception as e:  # noqa: BLE001 - see begin
            self.fail("ring_step", e)
            return -1

    def end_step(self, handle: int) -> None:
        if handle >= 0 and self.enabled:
            try:
                self.writer.set_end(handle, _time_ns())
            except Exception as e:  # noqa: BLE001 - see begin
                self.fail("end_step", e)

    def last_seq_of(self, handle: int) -> int:
        """The seq that ``begin`` gave the record of ``handle`` (-1 if it is gone)."""
        if handle < 0:
            return -1
        try:
            w = self.writer
            off = L.HEADER_SIZE + (handle % w.capacity) * L.RECORD_SIZE
            commit, seq = _COMMIT_AND_SEQ.unpack_from(w._map, off)
            return seq if commit == handle + 1 else -1
        except Exception as e:  # noqa: BLE001 - see begin
            self.fail("last_seq_of", e)
            return -1

    def mark(self, op: str, seq: int = 0, aux: int = 0, numel: int = 0,
             text: str = "", kind: int = int(L.RecordKind.MARK)) -> None:
        """A point event in the ring (batches, epochs, steps)."""
        if not self.enabled:
            return
        try:
            now = _time_ns()
            if now >= self._heartbeat_due:
                self.heartbeat(now)
            self.writer.append(kind, _OP.get(op, 0), 0, 0, 0, seq, now, now, numel, -1, aux,
                               0, -1, text.encode()[: L.TEXT_SIZE])
        except Exception as e:  # noqa: BLE001 - see begin
            self.fail(f"mark {op}", e)


_recorder: Recorder | None = None
_creating = threading.Lock()
_disabled = False


def enabled_by_env() -> bool:
    return bool(os.environ.get(ENV_RUN_DIR)) and not _disabled


def active() -> Recorder | None:
    """This process's Recorder (created on first call under ddpdoctor), else None."""
    global _recorder, _disabled
    rec = _recorder
    if rec is not None:
        return rec if rec.enabled else None
    if _disabled or not os.environ.get(ENV_RUN_DIR):
        return None
    with _creating:
        if _recorder is None and not _disabled:
            try:
                _recorder = Recorder(Path(os.environ[ENV_RUN_DIR]),
                                     os.environ.get(ENV_RUN_ID, ""))
            except OSError as e:
                _disabled = True
                print(f"ddpdoctor: cannot record this process ({e}); the job runs "
                      "without diagnosis", file=sys.stderr)
                return None
            _enable_faulthandler(_recorder)
    return _recorder


def _enable_faulthandler(rec: Recorder) -> None:
    from ddpdoctor.runtime.process_hooks import enable_faulthandler

    try:
        enable_faulthandler(rec)
    except OSError as e:
        rec.meta("runtime_error", where="faulthandler", error=str(e))


def existing() -> Recorder | None:
    """The Recorder if one was already created (never creates one)."""
    return _recorder


def reset_after_fork() -> None:
    """A forked child gets its own trace, created on first use."""
    global _recorder
    _recorder = None
