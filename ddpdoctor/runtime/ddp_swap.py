"""Put ddpdoctor's DDP under torch's name (``--ddp ring``) or record torch's DDP buckets.

``install("ring")``: ``torch.nn.parallel.DistributedDataParallel`` becomes
``ddpdoctor.ddp.wrapper.DistributedDataParallel``, so the user's script runs it unchanged.
``install("torch")``: torch's DDP stays; a communication hook records each bucket's
all-reduce as one collective with the BUCKET flag.  In both modes torch's class is
patched for that, since the ring DDP still hands some set-ups to torch's class.
Nothing here may raise into the user's job: a failure to record is noted and the
gradients are reduced anyway.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.distributed as dist

from ddpdoctor.runtime import recorder
from ddpdoctor.trace import layout as L

_BUCKET = int(L.RecordFlag.BUCKET)
_HOOKED = "_ddpdoctor_comm_hook"  # set on a torch DDP once a hook (ours or theirs) is in


def install(mode: str) -> None:
    """Apply ``mode`` ("ring" or "torch") to this process's torch."""
    from ddpdoctor.ddp import wrapper

    if mode not in ("ring", "torch"):
        raise ValueError(f"unknown --ddp mode {mode!r}; use 'ring' or 'torch'")
    _patch_torch_ddp(wrapper.TorchDDP)
    if mode == "ring":
        import torch.nn.parallel
        import torch.nn.parallel.distributed

        torch.nn.parallel.DistributedDataParallel = wrapper.DistributedDataParallel
        torch.nn.parallel.distributed.DistributedDataParallel = wrapper.DistributedDataParallel


# -- torch's DDP: a recording comm hook ------------------------------------------------
def recording_allreduce_hook(pg: Any) -> Callable:
    """A comm hook that reduces a bucket as torch's built-in one does (scale by 1/world,
    sum) through ``pg`` itself, and records the bucket's all-reduce."""
    real = pg if pg is not None else dist.distributed_c10d._get_default_group()
    world = real.size()

    def hook(state, bucket):  # type: ignore[no-untyped-def] # torch checks real annotations
        buf = bucket.buffer()
        handle = _begin(pg, buf, bucket)
        buf.mul_(1.0 / world)
        try:
            fut = real.allreduce([buf]).get_future()
        except BaseException:
            _end(handle, failed=True)
            raise
        return fut.then(functools.partial(_finish, handle))

    return hook


def wrap_user_hook(pg: Any, user_hook: Callable) -> Callable:
    """The user's comm hook, with each bucket recorded around it."""

    @functools.wraps(user_hook)  # torch checks the user's annotations, not ours
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        handle = _begin(pg, bucket.buffer(), bucket)
        try:
            fut = user_hook(state, bucket)
        except BaseException:
            _end(handle, failed=True)
            raise
        return fut.then(functools.partial(_pass_through, handle))

    return hook


def _begin(pg: Any, buf: torch.Tensor, bucket: Any) -> int:
    rec = recorder.active()
    if rec is None:
        return -1
    return rec.begin("all_reduce", pg, ins=[buf], reduce_op="avg", flags=_BUCKET,
                     aux=bucket.index(), callsite=recorder.user_callsite())


def _end(handle: int, failed: bool = False) -> None:
    rec = recorder.existing()
    if rec is not None and handle >= 0:
        rec.end(handle, failed=failed)


def _finish(handle: int, fut: torch.futures.Future) -> torch.Tensor:
    try:
        value = fut.value()[0]
    except BaseException:
        _end(handle, failed=True)
        raise
    _end(handle)
    return value


def _pass_through(handle: int, fut: torch.futures.Future) -> Any:
    try:
        value = fut.value()
    except BaseException:
        _end(handle, failed=True)
        raise
    _end(handle)
    return value


def _patch_torch_ddp(cls: type) -> None:
    """Record the buckets of every torch DDP: wrap user hooks when registered, add ours
    at the first forward when there is none."""
    if getattr(cls.forward, "__ddpdoctor_original__", None):
        return
    original_forward = cls.forward
    original_register = cls.register_comm_hook
    original_builtin = cls._register_builtin_comm_hook

    @functools.wraps(original_forward)
    def forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        if not self.__dict__.get(_HOOKED):
            _add_recording_hook(self, original_register)
        return original_forward(self, *inputs, **kwargs)

    @functools.wraps(original_register)
    def register_comm_hook(self: Any, state: object, hook: Callable) -> None:
        self.__dict__[_HOOKED] = True
        pg = getattr(self, "process_group", None)
        original_register(self, state, wrap_user_hook(_group_arg(pg), hook))

    @functools.wraps(original_builtin)
    def register_builtin(self: Any, comm_hook_type: Any) -> None:
        self.__dict__[_HOOKED] = True  # a C++ hook: its buckets cannot be recorded
        original_builtin(self, comm_hook_type)

    forward.__ddpdoctor_original__ = original_forward  # type: ignore[attr-defined]
    register_comm_hook.__ddpdoctor_original__ = original_register  # type: ignore[attr-defined]
    register_builtin.__ddpdoctor_original__ = original_builtin  # type: ignore[attr-defined]
    cls.forward = forward
    cls.register_comm_hook = register_comm_hook
    cls._register_builtin_comm_hook = register_builtin


def _group_arg(pg: Any) -> Any:
    """None for the default group, so that records name it as the user's calls do."""
    try:
        if pg is None or pg is dist.distributed_c10d._get_default_group():
            return None
    except (RuntimeError, ValueError):
        return pg
    return pg


def _add_recording_hook(ddp: Any, register: Callable) -> None:
    ddp.__dict__[_HOOKED] = True
    if recorder.active() is None or getattr(ddp, "_delay_all_reduce_all_params", False):
        return
    try:
        register(ddp, None, recording_allreduce_hook(_group_arg(ddp.process_group)))
    except (RuntimeError, ValueError, AttributeError) as e:
        rec = recorder.active()
        if rec is not None:
            rec.meta("ddp_hook_skipped", error=f"{type(e).__name__}: {e}"[:300])
