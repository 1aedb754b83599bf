"""ddpdoctor's DDP communication hook: torch's reducer keeps the buckets, ddpdoctor reduces them.

One hook, ``ddpdoctor_comm_hook``, goes on the reducer of every torch
``DistributedDataParallel`` (``attach``), right after torch builds the reducer (in
``__init__`` and in ``__setstate__``, which builds a new one after deepcopy or unpickling).
For each bucket it does what torch's reducer does without a hook (scale by one over the
group size, sum over the group) and records the bucket as one logical ``all_reduce``
(BUCKET flag, bucket index in ``aux``):

- ``HookMode.RING``: the sum is ddpdoctor's segmented ring (ddp/ring.py) run on one
  communication thread; the hook returns a Future that the thread completes, so backward
  goes on while a bucket travels.  Each ring send/recv is a sub-record of the bucket.
- ``HookMode.ALLREDUCE``: the sum is the group's own all-reduce (``--ddp torch`` on other
  backends than gloo or on GPU tensors, and where the ring cannot run); CPU buckets are
  completed at the round's last bucket on the backward's thread (deferred.py).  A
  ``--ddp torch`` DDP of CPU parameters on gloo gets no hook: torch's reducer runs as it
  is, its buckets recorded by its process group (ddp/recorded_group.py).

torch allows one hook per reducer, and ours is already there when the user registers
theirs: ``register_user_hook`` then keeps torch's bookkeeping and makes our hook call
theirs (each bucket still recorded around it).  The hook state lives outside the module
(a weak map), so deepcopy, pickle and ``torch.save`` of the model never see it.
"""

from __future__ import annotations

import functools
import threading
import weakref
from enum import Enum
from typing import Any, Callable

import torch
import torch.distributed as dist

from ddpdoctor.ddp import bucket_record, recorded_group
from ddpdoctor.ddp import ring as R
from ddpdoctor.ddp.bucket_record import begin as _begin
from ddpdoctor.ddp.bucket_record import end as _end
from ddpdoctor.ddp.deferred import Deferred
from ddpdoctor.runtime import recorder
from ddpdoctor.runtime.notices import notice

_SCALED_LATE = (torch.float32, torch.float64)  # dtypes whose bucket sum the ring scales
_ONCE_ERROR = "register_comm_hook or register_builtin_comm_hook can only be called once."


class HookMode(str, Enum):
    """How ddpdoctor's hook sums a bucket."""

    RING = "ring"  # ddpdoctor's ring on the communication thread, every step recorded
    ALLREDUCE = "allreduce"  # the process group's own all-reduce, the bucket recorded


class HookState:
    """What the hook of one DDP needs: its group and, once registered, the user's hook."""

    def __init__(self, ddp: Any, mode: HookMode):
        self.pg = ddp.process_group
        self.group = bucket_record.group_arg(self.pg)  # None: the default group
        self.mode = mode
        self.ddp = weakref.ref(ddp)
        self.user: tuple[Callable, object] | None = None  # (hook, state)
        self.deferred = Deferred(_end)  # ALLREDUCE mode's launched CPU buckets

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("ddpdoctor's DDP hook state is not picklable (it is never stored "
                        "on the module)")


_states: "weakref.WeakKeyDictionary[Any, HookState]" = weakref.WeakKeyDictionary()
_foreign: "weakref.WeakSet[Any]" = weakref.WeakSet()  # reducer already has torch's hook


def state_of(ddp: Any) -> HookState | None:
    """ddpdoctor's hook state on ``ddp``'s current reducer, if our hook is there."""
    return _states.get(ddp)


# -- the hook ---------------------------------------------------------------------------
def ddpdoctor_comm_hook(state: HookState, bucket: dist.GradBucket
                        ) -> torch.futures.Future[torch.Tensor]:
    """Average ``bucket`` over the group (or run the user's hook) and record it."""
    if state.user is not None:
        return _run_user_hook(state, bucket)
    ddp = state.ddp()
    if ddp is not None and ddp.__dict__.get("_divide_by_initial_world_size") is False:
        notice("join(divide_by_initial_world_size=False) is not honoured under ddpdoctor's "
               "DDP hook: gradients are divided by the whole world size (as torch does "
               "under any comm hook)")
    buf = bucket.buffer()
    n = state.pg.size()
    # The ring scales the sum where it is final, segment by segment while in cache (a pass
    # over the bucket here, on backward's thread, cost 3% of a 25M-parameter step); 16-bit
    # sums could overflow.  Else before the sum, times the reciprocal, as torch's reducer
    # does without a hook (buf / n differs in the last bit for n = 3, 5, 6, 7, ...).
    late = state.mode is HookMode.RING and n > 1 and buf.dtype in _SCALED_LATE
    if not late:
        buf.mul_(1.0 / n)
    handle = _begin(state.group, buf, bucket.index())
    if state.mode is HookMode.RING:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        job = _RingJob(state, buf, bucket.index(), handle, fut, 1.0 / n if late else None)
        if n == 1:
            job.run()
        else:
            _comm.submit(job)
        return fut.then(_sum_or_raise)
    try:
        work = state.pg.allreduce([buf])
    except BaseException:
        _end(handle, failed=True)
        raise
    if buf.device.type == "cpu":  # completed on this thread at the last bucket (deferred.py)
        return state.deferred.launch(work, buf, handle, bucket.index(), bucket.is_last())
    return work.get_future().then(functools.partial(_first_tensor, handle))


class _RingJob:
    """One bucket's ring all-reduce; completes ``fut`` with the summed buffer (times
    ``scale`` when given), or with the failure (``_sum_or_raise`` raises it)."""

    __slots__ = ("state", "buf", "index", "handle", "fut", "scale")

    def __init__(self, state: HookState, buf: torch.Tensor, index: int, handle: int,
                 fut: torch.futures.Future, scale: float | None = None):
        self.state, self.buf, self.index, self.handle, self.fut = (state, buf, index, handle,
                                                                   fut)
        self.scale = scale

    def run(self) -> None:
        rec = recorder.active() if self.handle >= 0 else None
        try:
            trace = R.ring_trace(rec, self.state.group, self.state.pg, self.handle,
                                 self.index) if rec is not None else None
            R.ring_all_reduce_flat(self.buf, self.state.pg, "sum", trace, scale=self.scale)
        except BaseException as e:  # noqa: BLE001 - raised to the backward pass by fut's then
            _end(self.handle, failed=True)
            self.fut.set_result(RuntimeError(
                f"ddpdoctor: gradient all-reduce of bucket {self.index} failed: {e}"))
            return
        _end(self.handle)
        self.fut.set_result(self.buf)


def _sum_or_raise(fut: torch.futures.Future) -> torch.Tensor:
    """A ring bucket's sum, or its failure raised.  torch's reducer takes a failure only as
    the error of a future, which a ``then`` callback that raises gives: a Python future's
    ``set_exception`` reaches it as a value, and backward raised "Unable to cast ... to
    Tensor" instead of the failure."""
    value = fut.value()
    if isinstance(value, BaseException):
        raise value
    return value


class _CommThread:
    """One daemon thread a process that runs ring jobs in submission (bucket) order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: list[_RingJob] = []
        self._thread: threading.Thread | None = None

    def submit(self, job: _RingJob) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # also after fork
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="ddpdoctor-comm")
                self._thread.start()
            self._jobs.append(job)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                job = self._jobs.pop(0)
            job.run()
            del job  # hold no bucket or process group while idle (a PG outliving
            # destroy_process_group is destroyed at interpreter exit, where gloo may abort)


_comm = _CommThread()


def _run_user_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future:
    hook, user_state = state.user  # type: ignore[misc]
    handle = _begin(state.group, bucket.buffer(), bucket.index())
    try:
        fut = hook(user_state, bucket)
    except BaseException:
        _end(handle, failed=True)
        raise
    return fut.then(functools.partial(bucket_record.pass_through, handle))


def wrap_user_hook(group: Any, user_hook: Callable) -> Callable:
    """``user_hook`` with each bucket recorded around it, for a reducer that already had a
    hook of torch's own (mixed precision) before ours could go on."""

    @functools.wraps(user_hook)  # torch checks the user's annotations, not ours
    def hook(user_state, bucket):  # type: ignore[no-untyped-def]
        handle = _begin(group, bucket.buffer(), bucket.index())
        try:
            fut = user_hook(user_state, bucket)
        except BaseException:
            _end(handle, failed=True)
            raise
        return fut.then(functools.partial(bucket_record.pass_through, handle))

    return hook


def _first_tensor(handle: int, fut: torch.futures.Future) -> torch.Tensor:
    try:
        value = fut.value()[0]
    except BaseException:
        _end(handle, failed=True)
        raise
    _end(handle)
    return value


# -- putting the hook on a DDP ------------------------------------------------------------
def _ring_obstacle(ddp: Any) -> str:
    """Why the ring cannot sum this DDP's buckets ('' when it can)."""
    try:
        backend = str(dist.get_backend(ddp.process_group)).lower()
    except (RuntimeError, ValueError):
        backend = "unknown"
    if "gloo" not in backend:
        return f"the {backend} backend"
    if getattr(ddp, "device_type", "cpu") != "cpu" or ddp.device_ids:
        return "GPU parameters"
    return ""


def attach(ddp: Any, mode: HookMode) -> None:
    """Put ddpdoctor's hook on ``ddp``'s reducer (just built by torch).  Where it cannot go,
    a notice says so and torch's DDP runs as it is."""
    mode = getattr(type(ddp), "_ddpdoctor_hook_mode", mode)
    if recorded_group.group_of(ddp) is not None and ddp not in _foreign:
        return  # --ddp torch on gloo: torch's reducer as it is, recorded by its group
    if ddp in _states or ddp in _foreign:
        if ddp in _foreign and getattr(ddp, "mixed_precision", None) is not None:
            notice("DistributedDataParallel(mixed_precision=...) keeps torch's own gradient "
                   "hook: its buckets are recorded, not reduced by ddpdoctor's ring")
        return
    if getattr(ddp, "_use_python_reducer", False) or getattr(
            ddp, "_delay_all_reduce_all_params", False) or not hasattr(ddp, "reducer"):
        notice("this DistributedDataParallel set-up (compiled python reducer or delayed "
               "all-reduce) has no gradient buckets: its gradients are not recorded")
        return
    if any(getattr(m, "sparse", False) for m in ddp.module.modules()
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))):
        notice("sparse gradients: torch's DDP reduces them unrecorded")
        return
    if mode is HookMode.RING:
        obstacle = _ring_obstacle(ddp)
        if obstacle:
            notice(f"ddpdoctor's ring DDP needs gloo and CPU tensors ({obstacle} here): "
                   "torch's all-reduce sums the gradients, each bucket recorded")
            mode = HookMode.ALLREDUCE
    state = HookState(ddp, mode)
    dist._register_comm_hook(ddp.reducer, state, ddpdoctor_comm_hook)
    _states[ddp] = state


def register_user_hook(ddp: Any, user_state: object, hook: Callable,
                       torch_register: Callable) -> None:
    """``ddp.register_comm_hook(user_state, hook)``: with our hook on the reducer, theirs
    replaces it (called by ours, its buckets recorded); else torch registers it."""
    state = _states.get(ddp)
    if state is None:
        _foreign.add(ddp)
        group = bucket_record.group_arg(ddp.process_group)
        torch_register(ddp, user_state, wrap_user_hook(group, hook))
        return
    if state.user is not None:
        raise RuntimeError(_ONCE_ERROR)
    ddp._check_comm_hook(hook)
    if ddp.logger is not None:
        ddp.logger._set_comm_hook_name(hook.__qualname__)
    ddp._comm_hooks.append((hook, user_state))
    state.user = (hook, user_state)


def register_builtin_hook(ddp: Any, comm_hook_type: Any, torch_register: Callable) -> None:
    """``ddp._register_builtin_comm_hook(type)``: its Python twin from torch's
    default_hooks replaces our hook (recorded); torch's C++ hook if ours is not there."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    state = _states.get(ddp)
    twins = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
             dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}
    if state is None or comm_hook_type not in twins:
        if state is not None:
            raise RuntimeError(_ONCE_ERROR)
        _foreign.add(ddp)
        torch_register(ddp, comm_hook_type)
        return
    if state.user is not None:
        raise RuntimeError(_ONCE_ERROR)
    if ddp.logger is not None:
        ddp.logger._set_comm_hook_name(str(comm_hook_type))
    state.user = (twins[comm_hook_type], ddp.process_group)
