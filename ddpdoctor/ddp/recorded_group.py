"""``--ddp torch`` on gloo: torch's reducer runs as it is; its buckets are recorded by torch's
flight recorder, or by a recording group.

No comm hook goes on such a DDP: torch's reducer keeps its own C++ path (the gradient is
divided while it is copied into the bucket; a Python hook pays a pass over every bucket and
Python per bucket, 2-4% of a small step).  By default, while torch builds the reducer
(DDP's ``__init__`` and ``__setstate__``), the reducer is given a ``RecordedGroup``, which
records each bucket as it is launched, whatever way the job then ends.  On request
(DDPDOCTOR_DDP_TORCH_BUCKETS=flight_recorder), on the default group with torch's flight
recorder on, the reducer keeps torch's own group and no Python runs per bucket
(``FlightRecordedBuckets``): the trace says once that the DDP's buckets are left to the
recorder, each rank dumps its recorder when the supervisor asks (runtime/fr_dump.py) and
as it exits, and the analysis takes the buckets from the dumps (analysis/load/fr_buckets.py);
a rank killed without a dump then has none.  The ``RecordedGroup`` is a process group with the DDP
group's own gloo backend, whose ``allreduce`` forwards the call and records the bucket right
after its launch (one logical ``all_reduce``, BUCKET flag, bucket index in ``aux``).  The
records of a backward pass's buckets are ended at its end, in the engine's final callbacks
(before the reducer's own, which waits for them too); Join's shadow passes run outside
backward and end theirs as the all-reduces complete.  Every other call the reducer makes
(the map of used parameters, the bucket order's broadcast) reaches gloo unrecorded, as
under torch.  Only gloo groups of CPU parameters without sparse gradients get either; other
DDPs keep ddpdoctor's hook (ddp/comm_hook.py).
"""

from __future__ import annotations

import contextlib
import atexit
import functools
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist

from ddpdoctor.ddp import bucket_record
from ddpdoctor.runtime import recorder
from ddpdoctor.runtime.record_text import describe
from ddpdoctor.trace import fr_files

_CPU = torch.device("cpu")
_time_ns = time.time_ns
_engine = torch.autograd.Variable._execution_engine
_task_id = getattr(torch._C, "_current_graph_task_id", None)  # -1 outside a backward pass
_groups: "weakref.WeakKeyDictionary[Any, RecordedGroup]" = weakref.WeakKeyDictionary()
_building = threading.local()  # .groups: the groups made for the DDP this thread builds
_swap_lock = threading.Lock()
_swap = {"depth": 0, "torch": None}  # DDPs being built, and torch's Reducer meanwhile
_exit_dump = {"registered": False}
BUCKETS_ENV = "DDPDOCTOR_DDP_TORCH_BUCKETS"  # "flight_recorder": no Python per bucket


class RecordedGroup(dist.ProcessGroup):
    """The group torch's reducer gets in place of the DDP's: the same gloo backend, every
    call forwarded to the DDP's group, each bucket's all-reduce recorded."""

    def __init__(self, pg: Any):
        super().__init__(pg.rank(), pg.size())
        gloo = dist.ProcessGroup.BackendType.GLOO
        self._register_backend(_CPU, gloo, pg._get_backend(_CPU))
        self._set_default_backend(gloo)
        self._pg = pg
        self._group = bucket_record.group_arg(pg)  # as the records name it
        self._launched: list[tuple[Any, int]] = []  # this backward's (future, record handle)
        self._task = -1  # the backward pass they belong to
        self._shadow = 0  # the next bucket index of a Join shadow pass
        self._site_task, self._site = -1, ""  # the pass whose call site ``_site`` is
        self._texts: dict[tuple, tuple[bytes, int]] = {}  # (shape, dtype, site) -> text

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return self._pg.name()

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        """The reducer's all-reduce of a bucket (recorded) or of its used-parameter map.
        The all-reduce is launched first and recorded right after, so that the record's
        Python runs while gloo already moves the bucket: recording first measured 2-3
        points more on a whole job's step, unpinned (bench/README.md).  The record's start is
        stamped before the launch, as every traced call's is: torch's flight recorder
        stamps its entry inside the launch, and the two are matched by those times."""
        t0 = _time_ns()
        try:
            work = self._pg.allreduce(tensors, opts)
        except BaseException:
            self._record(tensors, None, t0)
            raise
        self._record(tensors, work, t0)
        return work

    def _record(self, tensors: list[torch.Tensor], work: Any, t0: int) -> None:
        """Record a bucket's all-reduce launched at ``t0`` as ``work`` (None: it failed to
        launch); its record ends with the backward pass, or as it completes outside one."""
        t = tensors[0] if len(tensors) == 1 else None
        if t is None or not (t.is_floating_point() or t.is_complex()):  # not a bucket
            return
        try:
            task = _task_id()
            handle = self._begin(t, self._index(task), task, t0)
            if handle < 0:
                return
            if work is None:
                bucket_record.end(handle, failed=True)
                return
            fut = work.get_future()  # the future only: gloo's thread frees the work
            if task == -1:
                fut.then(functools.partial(bucket_record.pass_through, handle))
            else:
                self._launched.append((fut, handle))
        except Exception as e:  # noqa: BLE001 - no record, never a failed step
            _note(e)

    def _begin(self, t: torch.Tensor, index: int, task: int, t0: int) -> int:
        """Record bucket ``index``'s all-reduce (one logical ``all_reduce``, as
        ``bucket_record.begin`` records it).  The hot path of ``--ddp torch``: the user's
        line that runs backward is found once a pass, and the record's text is kept per
        bucket shape and line (the records' CPU on a 2.8 ms step of 2 buckets went from
        45-65 us to 38-47 us with it, bench/README.md)."""
        rec = recorder.active()
        if rec is None:
            return -1
        if task == -1 or task != self._site_task:
            self._site_task, self._site = task, recorder.call_sites(2)  # from allreduce up
        key = (t.shape, t.dtype, self._site)
        described = self._texts.get(key)
        if described is None:
            if len(self._texts) >= 256:
                self._texts.clear()
            described = self._texts[key] = describe((t,), (), self._site)
        return rec.begin_described("all_reduce", self._group, described[0], described[1],
                                   "avg", bucket_record.BUCKET_FLAG, -1, index, t_start=t0)

    def _index(self, task: int) -> int:
        """The next bucket's index: in backward pass ``task``, or in a Join shadow pass."""
        if task == -1:
            self._shadow += 1
            return self._shadow - 1
        if task != self._task:
            self._start(task)
        return len(self._launched)

    def new_shadow_pass(self) -> None:
        """Join's shadow pass starts: its buckets count from 0."""
        self._shadow = 0

    def _start(self, task: int) -> None:
        """The first bucket of backward pass ``task``: its records end in the pass's final
        callbacks.  A pass that ended without them (an exception inside backward) leaves its
        buckets to end as they complete."""
        stale, self._launched = self._launched, []
        for fut, handle in stale:  # (a done future runs its callback here and now)
            fut.then(functools.partial(bucket_record.pass_through, handle))
        self._task = task
        _engine.queue_callback(self._settle)

    def _settle(self) -> None:
        """End of the backward pass: wait for its buckets in order and end their records.
        A failed one fails the rest; torch's reducer raises its error right after."""
        launched, self._launched = self._launched, []
        self._task = -1
        rec = recorder.existing()
        if rec is None:
            return
        for k, (fut, handle) in enumerate(launched):
            try:
                fut.wait()
            except BaseException:  # noqa: BLE001 - torch's reducer raises it in finalize
                for _, failed in launched[k:]:
                    rec.end(failed, failed=True)
                return
            rec.end(handle)


class FlightRecordedBuckets:
    """A DDP whose reducer keeps torch's own group: no Python runs per bucket, and the
    buckets are read from torch's flight recorder when a dump is taken (every all-reduce of
    a floating tensor on the group that the trace lacks is one; analysis/load/fr_buckets.py).
    The trace says so once, in a ``ddp_buckets`` event with the DDP's parameter count."""

    def __init__(self, pg: Any, params: Any):
        self._pg = pg
        rec = recorder.active()
        if rec is not None:  # numel: what a backward pass's buckets move in all
            rec.meta("ddp_buckets", source="flight_recorder", group=pg.group_name,
                     numel=sum(p.numel() for p in params))
            _dump_at_exit()

    def new_shadow_pass(self) -> None:
        """Join's shadow pass starts: nothing to number here."""


def _dump_at_exit() -> None:
    """The rank's buckets live in its flight recorder only: dump it as the process ends
    (a clean exit or an uncaught exception; the supervisor asks the live ranks itself), so
    that a rank gone before its peers still has them in the report."""
    if not _exit_dump["registered"]:
        _exit_dump["registered"] = True
        atexit.register(_dump_now)


def _dump_now() -> None:
    from ddpdoctor.runtime import fr_dump

    run_dir = os.environ.get(recorder.ENV_RUN_DIR)
    rec = recorder.existing()
    try:
        if run_dir and rec is not None and rec.rank >= 0:
            fr_dump.dump_now(Path(run_dir), rec.rank)
    except Exception as e:  # noqa: BLE001 - at exit, a failed dump only loses the buckets
        _note(e)


def flight_recorded(pg: Any) -> bool:
    """Are ``pg``'s buckets left to the flight recorder?  Only when asked for
    (DDPDOCTOR_DDP_TORCH_BUCKETS=flight_recorder), on the default group (the one whose dump
    the analysis joins with the trace), with the recorder on (the size ``ddpdoctor run``
    sets unless the user set another).  By default the recording group records each bucket
    as it is launched: a rank killed mid-step (SIGKILL, the OOM killer: no dump at exit)
    keeps its buckets in its trace, and the live seqs of the supervisor count the buckets
    as the ranks issue them (with the recorder only, they lacked them until a dump: the
    seqs of the ranks disagreed and a mismatch was named only at the hang timeout)."""
    if os.environ.get(BUCKETS_ENV, "") != "flight_recorder" or \
            bucket_record.group_arg(pg) is not None:
        return False
    size = next((os.environ[n] for n in fr_files.BUFFER_ENVS if n in os.environ), "0")
    try:
        return int(size) > 0
    except ValueError:
        return False


def _forwarded(name: str) -> Any:
    def call(self: RecordedGroup, *args: Any) -> Any:
        return getattr(self._pg, name)(*args)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"The DDP group's own ``{name}``."
    return call


# Every other call the reducer makes goes to the DDP's group from Python, which lets go of
# the GIL before gloo takes its queue's lock.  torch's fallback for a method not defined
# here would take that lock holding the GIL, while a gloo thread, holding the lock, may be
# waiting for the GIL to free a finished work (a deadlock seen in sync_bucket_indices).
for _name in ("broadcast", "allgather", "_allgather_base", "allgather_coalesced",
              "allgather_into_tensor_coalesced", "allreduce_coalesced", "reduce",
              "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
              "alltoall", "alltoall_base", "barrier", "gather", "scatter", "send", "recv",
              "recv_anysource"):
    setattr(RecordedGroup, _name, _forwarded(_name))


def _run_eagerly(*functions: Any) -> None:
    """torch.compile never traces these (nor what they call): torch's reducer calls them
    from C++ while a compiled DDP's forward runs, where dynamo would try to compile them
    and fail on the group's attributes."""
    try:
        frames = torch._C._dynamo.eval_frame
        skip = frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.SKIP)
        for fn in functions:
            frames.set_code_exec_strategy(fn.__code__, skip)
    except (AttributeError, RuntimeError, TypeError):  # a torch without dynamo
        pass


_run_eagerly(RecordedGroup.allreduce, RecordedGroup.getBackendName, RecordedGroup._settle,
             RecordedGroup.broadcast)  # (every forwarded method shares broadcast's code)


def group_of(ddp: Any) -> "RecordedGroup | FlightRecordedBuckets | None":
    """How ``ddp``'s current reducer's buckets are recorded, if this module records them."""
    return _groups.get(ddp)


def _recordable(pg: Any, params: Any, expect_sparse: Any) -> bool:
    if _task_id is None or not hasattr(pg, "_get_backend"):  # a torch without them: the hook
        return False
    try:
        if dist.get_backend(pg) != "gloo":
            return False
    except (RuntimeError, ValueError):
        return False
    return all(p.device.type == "cpu" for p in params) and not any(expect_sparse)


def _reducer(*args: Any, **kwargs: Any) -> Any:
    """``dist.Reducer`` while a DDP is built: on the building thread, a gloo group of CPU
    parameters (DDP's fourth argument) keeps torch's group when the flight recorder can
    tell its buckets (``FlightRecordedBuckets``), else is replaced by a RecordedGroup."""
    made = getattr(_building, "groups", None)
    if made is not None and not made and len(args) >= 5 and not kwargs:
        try:
            if _recordable(args[3], args[0], args[4]):
                if flight_recorded(args[3]):
                    made.append(FlightRecordedBuckets(args[3], args[0]))
                else:
                    made.append(RecordedGroup(args[3]))
                    args = (*args[:3], made[0], *args[4:])
        except Exception as e:  # noqa: BLE001 - torch's reducer on torch's group then
            _note(e)
    return _swap["torch"](*args, **kwargs)


def _note(error: BaseException) -> None:
    rec = recorder.existing()
    if rec is not None:
        rec.note_error("recording torch's DDP buckets", error)


@contextlib.contextmanager
def recording_reducer(ddp: Any) -> Iterator[None]:
    """Around torch building ``ddp``'s reducer (DDP's ``__init__`` or ``__setstate__``):
    give it a RecordedGroup where it can have one, and keep that group with ``ddp``."""
    outer = getattr(_building, "groups", None)
    _building.groups = made = []
    with _swap_lock:
        if _swap["depth"] == 0:
            _swap["torch"] = dist.Reducer
            dist.Reducer = _reducer
        _swap["depth"] += 1
    try:
        yield
    finally:
        with _swap_lock:
            _swap["depth"] -= 1
            if _swap["depth"] == 0:
                dist.Reducer = _swap["torch"]
        _building.groups = outer
    if made and getattr(ddp, "reducer", None) is not None:
        _groups[ddp] = made[0]  # also keeps the group alive while the reducer uses it
    else:
        _groups.pop(ddp, None)
