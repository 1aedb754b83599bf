"""Recorder: the per-process recording API that patched calls and ddpdoctor's DDP use.

``active()`` returns the process's Recorder when it runs under ``ddpdoctor run`` (the
trace file is created on first use), else None.  Every public method is safe to call from
any thread and never raises: a failure inside the recorder disables it and is noted in
the meta log, so a bug in ddpdoctor degrades to "no diagnosis", never to a crash.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Sequence

from ddpdoctor.runtime import callsites
from ddpdoctor.runtime.record_text import describe
from ddpdoctor.runtime.fault_injection import injected_fault
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter
from ddpdoctor.rundir.safe_path import make_dirs

ENV_RUN_DIR = "DDPDOCTOR_RUN_DIR"
ENV_RUN_ID = "DDPDOCTOR_RUN_ID"

_time_ns = time.time_ns
_OP = L.OP_CODES
_KIND_COLL = int(L.RecordKind.COLLECTIVE)
_KIND_P2P = int(L.RecordKind.P2P)
_KIND_RING = int(L.RecordKind.RING_STEP)
_COMPUTING = L.RankState.COMPUTING

_COMMIT_AND_SEQ = struct.Struct("<q8xq")  # a record's commit and seq fields
HEARTBEAT_EVERY_NS = 500_000_000  # the header's heartbeat_ns is refreshed at most this often
_REDUCE_CODES = {name: i for i, name in enumerate(L.REDUCE_OPS)}
_new_counter = itertools.count
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # the disk (or the user's quota) is full


def user_callsite(depth: int = 2) -> str:
    """``file:line`` of the innermost frame that belongs to the user's code."""
    return callsites.user_site(sys._getframe(depth))


def call_sites(depth: int = 2) -> str:
    """``user_site|framework_site`` of the calling frame ``depth`` levels up (the record
    text's last two parts; the framework part is empty when the user called torch)."""
    return callsites.sites_text(sys._getframe(depth))


class Recorder:
    """Records this process's collectives, p2p calls, ring steps and events."""

    def __init__(self, run_dir: Path, run_id: str = ""):
        trace_dir = run_dir / "traces"
        make_dirs(trace_dir)  # every directory on the way checked (safe_path)
        self.run_dir = run_dir
        self.writer = TraceWriter(trace_dir, run_id, on_full=self._disk_full)
        self.enabled = True
        # id(pg) -> local index: a cache only, valid while the pg is alive (kept here)
        # and cleared when the groups are destroyed.  A group's identity is its name and
        # ranks (``_group_keys``), so a group re-created after destroy + init keeps its
        # index and its seq goes on.
        self._groups: dict[int, int] = {}
        self._group_objs: list[Any] = []
        self._group_keys: dict[tuple[str, tuple[int, ...]], int] = {}
        self._seq: list[Any] = []  # itertools.count per local group index (atomic)
        self._p2p_seq: dict[tuple[int, int, int], Any] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.rank = -1
        self.steps = 0  # optimizer steps taken (the header's step)
        self._heartbeat_due = 0  # wall time (ns) after which a record refreshes heartbeat_ns
        self._fault = injected_fault()
        self.flow: Any = None  # the control-flow recording (runtime/control_flow.py), if on
        from ddpdoctor.redact import redact_argv

        self.writer.meta("process", pid=os.getpid(), ppid=os.getppid(),
                         argv=redact_argv(sys.argv[:16]), executable=sys.executable)

    # -- failure containment ---------------------------------------------------------
    def fail(self, where: str, error: BaseException) -> None:
        """Disable recording after an internal error; the job itself goes on."""
        self.enabled = False
        self.note_error(where, error)

    def _disk_full(self, error: OSError) -> None:
        """The trace's disk could not grow: recording stops here (the job runs on), said
        once on stderr and, if it still fits, in the meta log (the report's notices)."""
        if not self.enabled:
            return  # stopped already (said then, or for another reason)
        text = (f"no disk left for the trace in {self.run_dir} ({error.strerror}): recording "
                "stopped there, the job runs on and its diagnosis ends at that point")
        self.note("notice", text=text)
        self.enabled = False
        who = f"rank {self.rank}" if self.rank >= 0 else f"process {os.getpid()}"
        try:
            print(f"ddpdoctor: notice: {who}: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass  # stderr closed: the meta event, if any, says it

    def note_error(self, where: str, error: BaseException) -> None:
        """Say in the meta log that a part of ddpdoctor failed (recording goes on)."""
        self.note("runtime_error", where=where, error=f"{type(error).__name__}: {error}"[:500])

    def note(self, event: str, **fields: Any) -> None:
        """A meta event, unless the run dir is gone or full (then nothing is left to tell)."""
        try:
            self.writer.meta(event, **fields)
        except OSError:
            pass

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
        except OSError as e:
            if e.errno in _NO_SPACE:
                self._disk_full(e)
            else:
                self.fail("meta", e)
        except (TypeError, ValueError) as e:
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
                try:
                    ranks = dist.get_process_group_ranks(real)
                except (RuntimeError, ValueError):
                    ranks = []
                name = str(getattr(real, "group_name", "") or len(self._seq))
                key = (name, tuple(ranks))
                idx = self._group_keys.get(key)
                if idx is None:
                    idx = self._group_keys[key] = len(self._seq)
                    self._seq.append(_new_counter())
                    self.writer.meta("group", index=idx, name=name, ranks=ranks,
                                     size=real.size(), default=pg is None)
                self._groups[id(real)] = idx
                self._group_objs.append(real)
            if pg is None:
                self._groups[id(None)] = idx
        return idx

    def forget_groups(self) -> list[Any]:
        """The process groups were destroyed: drop the object cache (the identities and
        their seq counters stay, for groups created again with the same name and ranks).
        Returns the group objects it held, for ``gloo_teardown.keep``."""
        with self._lock:
            self._groups = {}
            dropped, self._group_objs = self._group_objs, []
        return dropped

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
            text, numel = describe(ins, outs, callsite or call_sites(3))
        except Exception as e:  # noqa: BLE001 - any recorder bug must not reach the job
            self.fail(f"begin {op}", e)
            return -1
        return self.begin_described(op, pg, text, numel, reduce_op, flags, peer, aux, kind)

    def begin_described(self, op: str, pg: Any, text: bytes, numel: int,
                        reduce_op: str = "", flags: int = 0, peer: int = -1, aux: int = 0,
                        kind: int = _KIND_COLL, t_start: int = 0) -> int:
        """``begin`` for a caller that holds the record's text and input numel already
        (``describe``'s answer, kept by a DDP's recording group for its buckets); entered
        at ``t_start`` ns if the caller stamped it before entering torch, else now."""
        if not self.enabled:
            return -1
        try:
            if self._fault is not None:
                self._fault.check("begin", self.rank)
            g = self._groups.get(id(pg))
            if g is None:
                g = self._register_group(pg)
            if kind == _KIND_COLL:
                seq = next(self._seq[g])
            else:
                key = (g, peer, flags & 48)
                counter = self._p2p_seq.get(key)
                if counter is None:
                    counter = self._p2p_seq.setdefault(key, _new_counter())
                seq = next(counter)
            flow = self.flow
            if flow is not None:
                flow.close(g, seq if kind == _KIND_COLL else -1 - seq)
            now = t_start or _time_ns()
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

    def call(self, op: str, pg: Any, ins: Sequence[Any], outs: Sequence[Any] = (),
             reduce_op: str = "", flags: int = 0, peer: int = -1, aux: int = 0,
             callsite: str | None = None, kind: int = _KIND_COLL) -> "RecordedCall":
        """``with rec.call("all_reduce", group, [t]) as call: ...``: begin on entry, end
        on exit (marked failed when the body raises).  ``call.keep_open()`` inside the
        body leaves the record open, for an async call ended later by ``end``."""
        handle = self.begin(op, pg, ins, outs, reduce_op, flags, peer, aux,
                            callsite or call_sites(2), kind)
        return RecordedCall(self, handle)

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
        """A point event in the ring (batches, epochs, steps), now."""
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


class RecordedCall(AbstractContextManager):
    """One recorded call as a context manager (see ``Recorder.call``)."""

    __slots__ = ("rec", "handle", "_open")

    def __init__(self, rec: Recorder, handle: int):
        self.rec = rec
        self.handle = handle
        self._open = False

    def __enter__(self) -> "RecordedCall":
        return self

    def keep_open(self) -> int:
        """Leave the record open on a normal exit; returns its handle."""
        self._open = True
        return self.handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.rec.end(self.handle, failed=True)
        elif not self._open:
            self.rec.end(self.handle)


class NoCall(AbstractContextManager):
    """Stands in for a RecordedCall when nothing is recorded."""

    handle = -1

    def keep_open(self) -> int:
        return -1

    def __exit__(self, *exc: Any) -> None:
        return None


NO_CALL = NoCall()


def recorded_call(op: str, pg: Any, ins: Sequence[Any], outs: Sequence[Any] = (),
                  reduce_op: str = "", flags: int = 0, peer: int = -1, aux: int = 0,
                  callsite: str | None = None) -> "RecordedCall | NoCall":
    """``Recorder.call`` on this process's recorder, or a no-op when not recording: the
    one helper for code that runs a collective itself (the ring, comm hooks)."""
    rec = active()
    if rec is None:
        return NO_CALL
    return rec.call(op, pg, ins, outs, reduce_op, flags, peer, aux,
                    callsite or call_sites(2))


_recorder: Recorder | None = None
_creating = threading.Lock()
_disabled = False
_on_create: list[Callable[["Recorder"], None]] = []


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
            _created(_recorder)
    return _recorder


def on_create(fn: Callable[[Recorder], None]) -> None:
    """Call ``fn(recorder)`` when this process's Recorder is created (the process hooks
    enable faulthandler this way); an OSError it raises is noted, never raised."""
    _on_create.append(fn)


def _created(rec: Recorder) -> None:
    for fn in list(_on_create):
        try:
            fn(rec)
        except OSError as e:
            rec.meta("runtime_error", where=getattr(fn, "__name__", "on_create"), error=str(e))


def existing() -> Recorder | None:
    """The Recorder if one was already created (never creates one)."""
    return _recorder


def reset_after_fork() -> None:
    """A forked child gets its own trace, created on first use."""
    global _recorder
    _recorder = None
