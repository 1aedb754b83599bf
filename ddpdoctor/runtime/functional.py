"""Record functional collectives (``torch.distributed._functional_collectives``) run eagerly.

``funcol.all_reduce`` and friends call torch's C++ ops directly, past the patched
``torch.distributed`` functions, and return an ``AsyncCollectiveTensor`` that waits on
first use.  Each is wrapped to record the call (flag ASYNC); the record ends when
``funcol.wait_tensor`` returns for its output.  While torch traces (compile, export) the
wrappers step aside: the traced graph's collectives are recorded by ``runtime/compiled.py``.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable

from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

_ASYNC = int(L.RecordFlag.ASYNC)
# op name in the trace, position of the reduce op argument (or -1), position of the group
_OPS: dict[str, tuple[str, int, int]] = {
    "all_reduce": ("all_reduce", 1, 2),
    "all_gather_tensor": ("all_gather_into_tensor", -1, 2),
    "all_gather_single": ("all_gather_into_tensor", -1, 2),  # DTensor's (full_tensor, ...)
    "reduce_scatter_single": ("reduce_scatter_tensor", 1, 3),  # DTensor's Partial -> Shard
    "reduce_scatter_tensor": ("reduce_scatter_tensor", 1, 3),
    "all_to_all_single": ("all_to_all_single", -1, 3),
    "broadcast": ("broadcast", -1, 2),
}
# id(output tensor) -> (weak reference to it, record handle), until it is waited on.
# Keyed by id: tensors compare by value, so they cannot key a WeakKeyDictionary.
_open: dict[int, tuple[Any, int]] = {}
_lock = threading.Lock()


def _process_group(funcol: Any, group: Any, tag: str) -> Any:
    """The ProcessGroup object of a funcol group (a pg, a list of ranks, a mesh, a name)."""
    import torch.distributed as dist

    if isinstance(group, dist.ProcessGroup):
        return group
    name = funcol._resolve_group_name(group, tag)
    return dist.distributed_c10d._resolve_process_group(name)


def _wrap(funcol: Any, fn: Callable, op: str, reduce_at: int, group_at: int) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if funcol._are_we_tracing():
            return fn(*args, **kwargs)
        rec = R.active()
        if rec is None or not args:
            return fn(*args, **kwargs)
        try:
            group = args[group_at] if len(args) > group_at else kwargs.get("group")
            pg = _process_group(funcol, group, kwargs.get("tag", ""))
            reduce = ""
            if reduce_at >= 0:
                reduce = str(args[reduce_at] if len(args) > reduce_at
                             else kwargs.get("reduceOp", "sum")).lower()
            handle = rec.begin(op, pg, (args[0],), (), reduce, _ASYNC, -1, 0, None,
                               int(L.RecordKind.COLLECTIVE))
        except (RuntimeError, ValueError, TypeError, KeyError, AttributeError) as e:
            rec.note_error(f"functional {op}", e)
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            rec.end(handle, True)
            raise
        _track(rec, result, handle)
        return result

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _track(rec: R.Recorder, result: Any, handle: int) -> None:
    """End ``handle`` when the output is waited on (now, if it is not async), or when
    the output is dropped unwaited."""
    elem = getattr(result, "elem", None)
    if elem is None or getattr(result, "completed", True):
        rec.end(handle)
        return
    key = id(elem)
    try:
        ref = weakref.ref(elem, lambda _ref, k=key: _close(k, _ref))
    except TypeError:
        rec.end(handle)
        return
    with _lock:
        _open[key] = (ref, handle)


def _close(key: int, ref: Any, failed: bool = False) -> None:
    """End the record of output ``key`` once (when waited on, or dropped)."""
    with _lock:
        entry = _open.get(key)
        if entry is None or entry[0] is not ref:
            return
        del _open[key]
    rec = R.existing()
    if rec is not None:
        rec.end(entry[1], failed)


def _ref_of(tensor: Any) -> Any:
    """The weak reference under which ``tensor``'s record waits, else None."""
    entry = _open.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        return entry[0]
    return None


def _wrap_wait(funcol: Any, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wait_tensor(tensor: Any) -> Any:
        if not _open or funcol._are_we_tracing():
            return fn(tensor)
        ref = _ref_of(tensor)
        if ref is None:
            return fn(tensor)
        try:
            out = fn(tensor)
        except BaseException:
            _close(id(tensor), ref, failed=True)
            raise
        _close(id(tensor), ref)
        return out

    wait_tensor.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wait_tensor


def install() -> None:
    """Wrap the eager functional collectives once."""
    import torch.distributed._functional_collectives as funcol

    if getattr(funcol, "__ddpdoctor_patched__", False):
        return
    for name, (op, reduce_at, group_at) in _OPS.items():
        fn = getattr(funcol, name, None)
        if fn is not None:
            setattr(funcol, name, _wrap(funcol, fn, op, reduce_at, group_at))
    if hasattr(funcol, "wait_tensor"):
        funcol.wait_tensor = _wrap_wait(funcol, funcol.wait_tensor)
    funcol.__ddpdoctor_patched__ = True
