"""Wrap torch.distributed's collectives and p2p calls so each call is recorded."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import weakref
from typing import Any, Callable, Iterator

from ddpdoctor.runtime import gloo_teardown, init_hooks
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.op_specs import (SPECS, OpSpec, ShapeOnly, getter, is_simple_tensor_op,
                                        p2p_op_peer, peer_of, reduce_name, split_chunks,
                                        tensors_of)
from ddpdoctor.trace import layout as L

# Threads inside a recorded call (value None: nested calls are not recorded) or inside a
# ``_coalescing_manager`` (value: the batch that collects its calls into one record).
_inside: dict[int, list | None] = {}
_get_ident = threading.get_ident
_ASYNC = int(L.RecordFlag.ASYNC)
_OBJECT = int(L.RecordFlag.OBJECT)
_SEND = int(L.RecordFlag.SEND)
_RECV = int(L.RecordFlag.RECV)
_P2P = int(L.RecordKind.P2P)
_COLL = int(L.RecordKind.COLLECTIVE)
_pending: "weakref.WeakKeyDictionary[Any, weakref.finalize]" = weakref.WeakKeyDictionary()
_open_async: dict[int, R.Recorder] = {}  # handle -> recorder, until the call completes


def _track_async(rec: R.Recorder, work: Any, handle: int) -> None:
    """End ``handle`` when the async ``work`` completes, however the job learns of it:
    ``work.wait()``, its future (``get_future().wait()``, ``.then()``, ``wait_all``), or
    polling ``is_completed()``; or when the Work is dropped unwaited."""
    if handle < 0:
        return
    _open_async[handle] = rec
    try:
        _pending[work] = weakref.finalize(work, _end_once, handle)
    except TypeError:
        _end_once(handle)
        return
    try:
        work.get_future().add_done_callback(functools.partial(_end_from_future, handle))
    except (RuntimeError, AttributeError, NotImplementedError):
        pass  # this backend's Work has no future: wait() or the finalizer ends it


def _end_from_future(handle: int, fut: Any) -> None:
    """The async call's future completed: end its record, failed when the future holds an
    error (a peer gone, a timeout), as a blocking call that raised is."""
    try:
        fut.value()
        failed = False
    except BaseException:  # noqa: BLE001 - the work's own error: the user's wait() raises it
        failed = True
    _end_once(handle, failed)


def _end_once(handle: int, failed: bool = False) -> None:
    """End an async record the first time its completion is seen (from any thread)."""
    rec = _open_async.pop(handle, None)
    if rec is not None:
        rec.end(handle, failed)


def _wrap(name: str, fn: Callable, spec: OpSpec) -> Callable:
    if is_simple_tensor_op(spec):
        return _wrap_simple(name, fn, spec)
    return _wrap_general(name, fn, spec)


def _wrap_simple(name: str, fn: Callable, spec: OpSpec) -> Callable:
    """The hot path: collectives on one tensor, their arguments read by precomputed getters."""
    kind = _P2P if spec.direction else _COLL
    flags0 = spec.direction
    always_async = name in ("isend", "irecv")
    get_tensor = getter(spec, spec.ins[0])
    get_group = getter(spec, "group")
    get_async = getter(spec, "async_op", False) if "async_op" in spec.params else None
    get_op = getter(spec, "op") if spec.reduce else None
    has_peer = bool(spec.peer)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        if rec is None:
            rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            return _call_unrecorded(name, fn, args, kwargs, tid, (get_tensor(args, kwargs),),
                                    spec)
        try:
            group = get_group(args, kwargs)
            is_async = always_async or (get_async is not None and
                                        bool(get_async(args, kwargs)))
            handle = rec.begin(
                name, group, (get_tensor(args, kwargs),), (),
                reduce_name(get_op(args, kwargs)) if get_op is not None else "",
                flags0 | (_ASYNC if is_async else 0),
                peer_of(spec, args, kwargs, group) if has_peer else -1, 0, None, kind)
        except Exception as e:  # noqa: BLE001 - recording must never break the call
            rec.fail(f"wrap {name}", e)
            return fn(*args, **kwargs)
        return _call_recorded(rec, fn, args, kwargs, handle, is_async, tid)

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _call_unrecorded(name: str, fn: Callable, args: tuple, kwargs: dict, tid: int,
                     ins: tuple, spec: OpSpec) -> Any:
    """A call not recorded on its own: nested in a recorded call, or part of a
    ``_coalescing_manager`` batch (then noted in the batch, recorded at its end)."""
    batch = _inside.get(tid)
    if batch is None:
        return fn(*args, **kwargs)
    try:
        batch.append((name, ins or tuple(tensors_of(spec, spec.ins, args, kwargs)),
                      reduce_name(spec.arg(args, kwargs, "op")) if spec.reduce else ""))
    except (TypeError, IndexError, AttributeError) as e:
        rec = R.existing()
        if rec is not None:
            rec.note_error(f"coalesced {name}", e)
    _inside[tid] = None
    try:
        return fn(*args, **kwargs)
    finally:
        _inside[tid] = batch


def _wrap_coalescing_manager(fn: Callable) -> Callable:
    """``_coalescing_manager``: the calls made inside it become one coalesced record."""

    @contextlib.contextmanager
    @functools.wraps(fn)
    def _coalescing_manager(group: Any = None, device: Any = None,
                            async_ops: bool = False) -> Iterator[Any]:
        rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            with fn(group, device, async_ops) as cm:
                yield cm
            return
        batch: list = []
        inner = fn(group, device, async_ops)
        cm = inner.__enter__()
        _inside[tid] = batch
        try:
            yield cm
        except BaseException:
            _inside.pop(tid, None)
            if not inner.__exit__(*sys.exc_info()):
                raise
            return
        _inside[tid] = None  # the exit runs the coalesced collective
        handle = _begin_coalesced(rec, batch, group, async_ops)
        try:
            inner.__exit__(None, None, None)
        except BaseException:
            rec.end(handle, True)
            raise
        finally:
            _inside.pop(tid, None)
        works = getattr(cm, "works", None)
        if async_ops and works:
            _track_async(rec, works[0], handle)
        else:
            rec.end(handle)

    _coalescing_manager.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return _coalescing_manager


def _begin_coalesced(rec: R.Recorder, batch: list, group: Any, async_ops: bool) -> int:
    """One record for a coalesced batch: op ``<op>_coalesced`` (or ``coalesced`` when the
    ops differ or have no such name), every tensor of the batch as its inputs."""
    if not batch:
        return -1
    names = {name for name, _, _ in batch}
    op = f"{batch[0][0]}_coalesced" if len(names) == 1 else "coalesced"
    if op not in L.OP_CODES:
        op = "coalesced"
    ins = [t for _, tensors, _ in batch for t in tensors]
    return rec.begin(op, group, ins, (), batch[0][2], _ASYNC if async_ops else 0, -1, len(batch),
                     None, _COLL)


def _call_recorded(rec: R.Recorder, fn: Callable, args: tuple, kwargs: dict, handle: int,
                   is_async: bool, tid: int) -> Any:
    """Run the real call with nested calls unrecorded; end the record when it returns
    (or, for async calls, when its Work completes).  ``RecordedCall`` spelled out: this
    is the hottest path, and a context manager object costs 0.3 us a call."""
    _inside[tid] = None
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        rec.end(handle, True)
        raise
    finally:
        _inside.pop(tid, None)
    if is_async and result is not None:
        _track_async(rec, result, handle)
    else:
        rec.end(handle)
    return result


def _wrap_general(name: str, fn: Callable, spec: OpSpec) -> Callable:
    kind = _P2P if spec.direction else _COLL
    flags0 = spec.direction | (_OBJECT if spec.obj else 0)
    always_async = name in ("isend", "irecv")
    has_async = "async_op" in spec.params
    by_peer = name == "all_to_all_single"  # its split sizes recorded as one shape a peer

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        if rec is None:
            rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            return _call_unrecorded(name, fn, args, kwargs, tid, (), spec)
        try:
            group = spec.arg(args, kwargs, "group")
            ins = tensors_of(spec, spec.ins, args, kwargs) if spec.ins else []
            outs = tensors_of(spec, spec.outs, args, kwargs) if spec.outs else ()
            if by_peer:
                ins, outs = split_chunks(spec, args, kwargs, ins, outs)
            for lname in spec.lists:
                lst = spec.arg(args, kwargs, lname)
                ins.append(ShapeOnly(len(lst) if lst is not None else 0))
            is_async = always_async or (has_async and
                                        bool(spec.arg(args, kwargs, "async_op", False)))
            handle = rec.begin(
                name, group, ins, outs,
                reduce_name(spec.arg(args, kwargs, "op")) if spec.reduce else "",
                flags0 | (_ASYNC if is_async else 0), peer_of(spec, args, kwargs, group),
                kind=kind)
        except Exception as e:  # noqa: BLE001 - recording must never break the call
            rec.fail(f"wrap {name}", e)
            return fn(*args, **kwargs)
        return _call_recorded(rec, fn, args, kwargs, handle, is_async, tid)

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _wrap_batch_isend_irecv(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(p2p_op_list: list) -> Any:
        rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            return fn(p2p_op_list)
        handles = []
        try:
            for p in p2p_op_list:
                op_name = getattr(p.op, "__name__", "isend")
                direction = _RECV if "recv" in op_name else _SEND
                handles.append(rec.begin(
                    "irecv" if direction == _RECV else "isend", p.group, [p.tensor], [], "",
                    direction | _ASYNC, p2p_op_peer(p), kind=_P2P))
        except Exception as e:  # noqa: BLE001 - recording must never break the call
            rec.fail("wrap batch_isend_irecv", e)
        _inside[tid] = None
        try:
            works = fn(p2p_op_list)
        except BaseException:
            for h in handles:
                rec.end(h, failed=True)
            raise
        finally:
            _inside.pop(tid, None)
        works_list = list(works or [])
        if len(works_list) == len(handles):
            for work, h in zip(works_list, handles):
                _track_async(rec, work, h)
        elif works_list:  # one Work for the whole coalesced batch
            for h in handles:
                _track_async(rec, works_list[0], h)
        else:
            for h in handles:
                rec.end(h)
        return works

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _patch_work_wait(work_cls: Any) -> None:
    original = work_cls.wait
    if getattr(original, "__ddpdoctor_original__", None):
        return

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = _pending.pop(self, None) if _pending.data else None
        if done is None:
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            info = done.detach()  # (work, func, args, kwargs): args[0] is the handle
            if info:
                _end_once(info[2][0], failed=True)
            raise
        done()  # records t_end (if the completion callback has not already)
        return result

    wait.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    work_cls.wait = wait


def _wrap_destroy(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        whole = not (args or kwargs.get("group"))
        groups = gloo_teardown.live_groups() if whole else []
        if rec is not None and whole:
            rec.meta("destroy")
        result = fn(*args, **kwargs)
        if whole:
            if rec is not None:
                groups += rec.forget_groups()
            gloo_teardown.keep(groups)
        return result

    destroy_process_group.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return destroy_process_group


def _install_compiled(wrapped: dict[str, Callable]) -> None:
    """Record the collectives of torch.compile'd code (runtime/compiled.py) and eager
    functional collectives (runtime/functional.py) too."""
    try:
        from ddpdoctor.runtime import compiled, functional

        compiled.install(wrapped)
        functional.install()
    except (ImportError, AttributeError, RuntimeError, TypeError, ValueError) as e:
        rec = R.active()
        if rec is not None:
            rec.note_error("recording compiled collectives", e)


def install() -> None:
    """Patch torch.distributed (both its namespace and distributed_c10d) once."""
    import torch.distributed as dist

    if not dist.is_available() or getattr(dist, "__ddpdoctor_patched__", False):
        return
    c10d = dist.distributed_c10d
    wrapped: dict[str, Callable] = {}
    for name, spec in SPECS.items():
        fn = getattr(c10d, name, None)
        if fn is not None:
            wrapped[name] = _wrap(name, fn, spec)
    if hasattr(c10d, "_coalescing_manager"):
        wrapped["_coalescing_manager"] = _wrap_coalescing_manager(c10d._coalescing_manager)
    if hasattr(c10d, "batch_isend_irecv"):
        wrapped["batch_isend_irecv"] = _wrap_batch_isend_irecv(c10d.batch_isend_irecv)
    wrapped.update(init_hooks.patched(c10d))
    wrapped["destroy_process_group"] = _wrap_destroy(c10d.destroy_process_group)
    for name, fn in wrapped.items():
        setattr(c10d, name, fn)
        if getattr(dist, name, None) is not None:
            setattr(dist, name, fn)
    _patch_work_wait(c10d.Work)
    _install_compiled(wrapped)
    dist.__ddpdoctor_patched__ = True
    if dist.is_initialized():  # torch was imported and initialised before us
        init_hooks.on_init()
