"""Put ddpdoctor's comm hook on every torch DistributedDataParallel of this process.

The user's ``torch.nn.parallel.DistributedDataParallel`` stays torch's class; its
methods that build a reducer (``__init__``, ``__setstate__``) are wrapped: ``--ddp ring``
attaches ddpdoctor's hook (the instrumented ring); ``--ddp torch`` gives the reducer a
recording process group (gloo, CPU parameters: ddp/recorded_group.py), else attaches the
hook with the group's own all-reduce.  ``register_comm_hook`` /
``_register_builtin_comm_hook`` hand a user's hook to ours (see ddp/comm_hook.py), and
Join's shadow pass numbers its buckets afresh.  DDP's construction collectives (parameter
check, state broadcast, buffer broadcast each forward) are recorded too.  Nothing here
raises into the user's job: a failure to attach is noted and torch's DDP runs as it is.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch.distributed as dist

from ddpdoctor.ddp import bucket_record, comm_hook, recorded_group
from ddpdoctor.ddp.ring_plan import global_rank
from ddpdoctor.runtime import recorder, replica_watch


def install(mode: str) -> None:
    """Apply ``mode`` ("ring" or "torch") to this process's torch DDP."""
    if mode not in ("ring", "torch"):
        raise ValueError(f"unknown --ddp mode {mode!r}; use 'ring' or 'torch'")
    import torch.nn.parallel.distributed as torch_ddp

    hook_mode = comm_hook.HookMode.RING if mode == "ring" else comm_hook.HookMode.ALLREDUCE
    _patch_ddp_class(torch_ddp.DistributedDataParallel, hook_mode)
    _patch_ddp_collectives()


def _attach_safely(ddp: Any, mode: comm_hook.HookMode) -> None:
    try:
        comm_hook.attach(ddp, mode)
    except (RuntimeError, ValueError, TypeError, AttributeError) as e:
        rec = recorder.active()
        if rec is not None:
            rec.note_error("attaching ddpdoctor's DDP comm hook", e)


def _reducer_for(ddp: Any, mode: comm_hook.HookMode) -> Any:
    """Around torch building ``ddp``'s reducer: in ALLREDUCE mode (``--ddp torch``) the
    reducer gets a recording group where it can (ddp/recorded_group.py)."""
    mode = getattr(type(ddp), "_ddpdoctor_hook_mode", mode)
    if mode is comm_hook.HookMode.ALLREDUCE:
        return recorded_group.recording_reducer(ddp)
    return contextlib.nullcontext()


def _patch_ddp_class(cls: type, mode: comm_hook.HookMode) -> None:
    if getattr(cls.__init__, "__ddpdoctor_original__", None):
        return
    original_init = cls.__init__
    original_setstate = cls.__setstate__
    original_register = cls.register_comm_hook
    original_builtin = cls._register_builtin_comm_hook
    original_shadow = cls._match_all_reduce_for_bwd_pass

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _record_parameters(args[0] if args else kwargs.get("module"), kwargs)
        with _reducer_for(self, mode):
            original_init(self, *args, **kwargs)
        _attach_safely(self, mode)
        replica_watch.track(self)

    @functools.wraps(original_setstate)
    def __setstate__(self: Any, state: Any) -> None:
        with _reducer_for(self, mode):
            original_setstate(self, state)
        _attach_safely(self, mode)

    @functools.wraps(original_shadow)
    def _match_all_reduce_for_bwd_pass(self: Any) -> Any:
        group = recorded_group.group_of(self)
        if group is not None:
            group.new_shadow_pass()
        return original_shadow(self)

    @functools.wraps(original_register)
    def register_comm_hook(self: Any, state: object, hook: Callable) -> None:
        comm_hook.register_user_hook(self, state, hook, original_register)

    @functools.wraps(original_builtin)
    def _register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        comm_hook.register_builtin_hook(self, comm_hook_type, original_builtin)

    for fn, original in ((__init__, original_init), (__setstate__, original_setstate),
                         (register_comm_hook, original_register),
                         (_register_builtin_comm_hook, original_builtin),
                         (_match_all_reduce_for_bwd_pass, original_shadow)):
        fn.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
        setattr(cls, original.__name__, fn)


# -- the parameter table -------------------------------------------------------------------
def parameter_table(module: Any) -> dict[str, Any]:
    """What a DDP built on ``module`` holds: every parameter (module path, shape,
    requires_grad), and the reducer's parameters in its index order (torch's
    ``_build_params_for_reducer``: requires_grad, not ignored, shared ones once), so that
    the indices torch's reducer errors give can be named."""
    ignored = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()) or ())
    seen: set[int] = set()
    params, reducer = [], []
    for module_name, sub in module.named_modules():
        for name, p in sub.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            path = f"{module_name}.{name}" if module_name else name
            params.append([path, list(p.shape), bool(p.requires_grad)])
            if p.requires_grad and f"{module_name}.{name}" not in ignored:
                reducer.append(path)
    return {"params": params, "reducer": reducer}


DDP_OPTIONS = ("find_unused_parameters", "static_graph")  # what a reducer error's fix rests on


def _record_parameters(module: Any, kwargs: dict[str, Any]) -> None:
    """The module's parameter table in the rank's meta log, once per DDP built (before
    torch's construction check, which may raise on a model that differs between ranks),
    with the DDP options the user passed by keyword."""
    rec = recorder.active()
    if rec is None or module is None:
        return
    try:
        options = {k: bool(kwargs[k]) for k in DDP_OPTIONS if k in kwargs}
        rec.meta("ddp_params", **parameter_table(module), options=options)
    except (AttributeError, TypeError, ValueError, RuntimeError) as e:  # odd: no table
        rec.note_error("recording DDP's parameter table", e)


# -- DDP's own collectives outside the buckets --------------------------------------------
def _patch_ddp_collectives() -> None:
    """Record ``dist._broadcast_coalesced`` (states at construction, buffers each forward)
    and ``dist._verify_params_across_processes`` (construction) as the user's calls."""
    if getattr(dist._broadcast_coalesced, "__ddpdoctor_original__", None):
        return
    original_broadcast = dist._broadcast_coalesced
    original_verify = dist._verify_params_across_processes

    @functools.wraps(original_broadcast)
    def broadcast_coalesced(pg: Any, tensors: Any, buffer_size: int, src: int = 0) -> Any:
        return _recorded("broadcast", pg, list(tensors), global_rank(pg, src),
                         original_broadcast, pg, tensors, buffer_size, src)

    @functools.wraps(original_verify)
    def verify_params(pg: Any, params: Any, *args: Any) -> Any:
        return _recorded("all_gather", pg, [], -1, original_verify, pg, params, *args)

    broadcast_coalesced.__ddpdoctor_original__ = original_broadcast  # type: ignore[attr-defined]
    verify_params.__ddpdoctor_original__ = original_verify  # type: ignore[attr-defined]
    dist._broadcast_coalesced = broadcast_coalesced
    dist._verify_params_across_processes = verify_params


def _recorded(op: str, pg: Any, ins: list, peer: int, fn: Callable, *args: Any) -> Any:
    rec = recorder.active()
    if rec is None:
        return fn(*args)
    h = rec.begin(op, bucket_record.group_arg(pg), ins=ins, peer=peer,
                  callsite=recorder.call_sites())
    try:
        result = fn(*args)
    except BaseException:
        rec.end(h, failed=True)
        raise
    rec.end(h)
    return result
