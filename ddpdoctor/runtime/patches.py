"""Wrap torch.distributed's collectives and p2p calls so each call is recorded."""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from ddpdoctor.runtime import init_hooks
from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L

_inside: set[int] = set()  # threads inside a recorded call: nested calls are not recorded
_get_ident = threading.get_ident
_ASYNC = int(L.RecordFlag.ASYNC)
_OBJECT = int(L.RecordFlag.OBJECT)
_SEND = int(L.RecordFlag.SEND)
_RECV = int(L.RecordFlag.RECV)
_P2P = int(L.RecordKind.P2P)
_COLL = int(L.RecordKind.COLLECTIVE)
_pending: "weakref.WeakKeyDictionary[Any, weakref.finalize]" = weakref.WeakKeyDictionary()


def _track_async(rec: R.Recorder, work: Any, handle: int) -> None:
    """End ``handle`` when ``work.wait()`` returns, or when the Work is dropped unwaited."""
    try:
        _pending[work] = weakref.finalize(work, rec.end, handle)
    except TypeError:
        rec.end(handle)


@dataclass(frozen=True)
class OpSpec:
    """Where a torch.distributed function keeps its arguments (by position and name).

    ``ins``/``outs`` name a tensor argument (``"tensor"``) or a list of tensors
    (``"*tensor_list"``); ``peer`` is the src/dst argument; ``direction`` marks p2p calls.
    """

    params: tuple[str, ...]
    ins: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    reduce: bool = False
    peer: str = ""
    direction: int = 0
    obj: bool = False
    lists: tuple[str, ...] = ()  # object lists: their length is recorded as a shape

    def arg(self, args: tuple, kwargs: dict, name: str, default: Any = None) -> Any:
        if kwargs and name in kwargs:
            return kwargs[name]
        i = _POSITIONS.get((self.params, name))
        if i is None:
            return default
        return args[i] if i < len(args) else default


SPECS: dict[str, OpSpec] = {
    "all_reduce": OpSpec(("tensor", "op", "group", "async_op"), ins=("tensor",), reduce=True),
    "all_reduce_coalesced": OpSpec(("tensors", "op", "group", "async_op"),
                                   ins=("*tensors",), reduce=True),
    "broadcast": OpSpec(("tensor", "src", "group", "async_op", "group_src"),
                        ins=("tensor",), peer="src"),
    "barrier": OpSpec(("group", "async_op", "device_ids", "timeout")),
    "monitored_barrier": OpSpec(("group", "timeout", "wait_all_ranks")),
    "all_gather": OpSpec(("tensor_list", "tensor", "group", "async_op"),
                         ins=("tensor",), outs=("*tensor_list",)),
    "all_gather_into_tensor": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                                     ins=("input_tensor",), outs=("output_tensor",)),
    "_all_gather_base": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                               ins=("input_tensor",), outs=("output_tensor",)),
    "all_gather_single": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                                ins=("input_tensor",), outs=("output_tensor",)),
    "all_gather_coalesced": OpSpec(("output_tensor_lists", "input_tensor_list", "group",
                                    "async_op"), ins=("*input_tensor_list",)),
    "reduce_scatter_single": OpSpec(("output", "input", "op", "group", "async_op"),
                                    ins=("input",), outs=("output",), reduce=True),
    "reduce_scatter": OpSpec(("output", "input_list", "op", "group", "async_op"),
                             ins=("*input_list",), outs=("output",), reduce=True),
    "reduce_scatter_tensor": OpSpec(("output", "input", "op", "group", "async_op"),
                                    ins=("input",), outs=("output",), reduce=True),
    "_reduce_scatter_base": OpSpec(("output", "input", "op", "group", "async_op"),
                                   ins=("input",), outs=("output",), reduce=True),
    "reduce": OpSpec(("tensor", "dst", "op", "group", "async_op", "group_dst"),
                     ins=("tensor",), reduce=True, peer="dst"),
    "gather": OpSpec(("tensor", "gather_list", "dst", "group", "async_op", "group_dst"),
                     ins=("tensor",), peer="dst"),
    "scatter": OpSpec(("tensor", "scatter_list", "src", "group", "async_op", "group_src"),
                      outs=("tensor",), peer="src"),
    "all_to_all": OpSpec(("output_tensor_list", "input_tensor_list", "group", "async_op"),
                         ins=("*input_tensor_list",), outs=("*output_tensor_list",)),
    "all_to_all_single": OpSpec(("output", "input", "output_split_sizes",
                                 "input_split_sizes", "group", "async_op"),
                                ins=("input",), outs=("output",)),
    "send": OpSpec(("tensor", "dst", "group", "tag", "group_dst"), ins=("tensor",),
                   peer="dst", direction=_SEND),
    "recv": OpSpec(("tensor", "src", "group", "tag", "group_src"), ins=("tensor",),
                   peer="src", direction=_RECV),
    "isend": OpSpec(("tensor", "dst", "group", "tag", "group_dst"), ins=("tensor",),
                    peer="dst", direction=_SEND),
    "irecv": OpSpec(("tensor", "src", "group", "tag", "group_src"), ins=("tensor",),
                    peer="src", direction=_RECV),
    "all_gather_object": OpSpec(("object_list", "obj", "group"), obj=True,
                                lists=("object_list",)),
    "broadcast_object_list": OpSpec(("object_list", "src", "group", "device", "group_src"),
                                    obj=True, peer="src", lists=("object_list",)),
    "gather_object": OpSpec(("obj", "object_gather_list", "dst", "group", "group_dst"),
                            obj=True, peer="dst"),
    "scatter_object_list": OpSpec(("scatter_object_output_list",
                                   "scatter_object_input_list", "src", "group",
                                   "group_src"), obj=True, peer="src",
                                  lists=("scatter_object_output_list",)),
    "send_object_list": OpSpec(("object_list", "dst", "group", "device", "group_dst",
                                "use_batch"), obj=True, peer="dst", direction=_SEND,
                               lists=("object_list",)),
    "recv_object_list": OpSpec(("object_list", "src", "group", "device", "group_src",
                                "use_batch"), obj=True, peer="src", direction=_RECV,
                               lists=("object_list",)),
}


_POSITIONS: dict[tuple[tuple[str, ...], str], int] = {
    (spec.params, name): i for spec in SPECS.values() for i, name in enumerate(spec.params)}


class _Shape:
    """Stands in for a tensor when only a length is known (object lists)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, n: int):
        self.shape = (n,)
        self.dtype = "torch.object"

    def numel(self) -> int:
        return self.shape[0]


def _tensors(spec: OpSpec, names: tuple[str, ...], args: tuple, kwargs: dict) -> list:
    out: list = []
    for name in names:
        if name[0] == "*":
            value = spec.arg(args, kwargs, name[1:])
            if value:
                out.extend(value)
        else:
            value = spec.arg(args, kwargs, name)
            if value is not None:
                out.append(value)
    return out


_REDUCE_NAMES: dict[Any, str] = {}


def _reduce_name(op: Any) -> str:
    if op is None:
        return "sum"
    try:
        return _REDUCE_NAMES[op]
    except (KeyError, TypeError):
        pass  # not seen yet (or unhashable): name it below
    name = str(getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]).lower()
    try:
        _REDUCE_NAMES[op] = name
    except TypeError:
        pass  # unhashable op objects are named each time
    return name


def _peer(spec: OpSpec, args: tuple, kwargs: dict, group: Any) -> int:
    if not spec.peer:
        return -1
    value = spec.arg(args, kwargs, spec.peer)
    if value is None:  # group_src / group_dst: a rank inside the group
        local = spec.arg(args, kwargs, "group_" + spec.peer)
        if local is None:
            return -1
        try:
            import torch.distributed as dist

            return dist.get_global_rank(group, local) if group is not None else int(local)
        except (RuntimeError, ValueError):
            return int(local)
    return int(value)


def _getter(spec: OpSpec, name: str, default: Any = None) -> Callable[[tuple, dict], Any]:
    """A fast reader of argument ``name`` (positional or keyword) of calls to ``spec``."""
    if name not in spec.params:
        return lambda args, kwargs: kwargs.get(name, default) if kwargs else default
    i = spec.params.index(name)

    def get(args: tuple, kwargs: dict) -> Any:
        if len(args) > i:
            return args[i]
        return kwargs.get(name, default) if kwargs else default

    return get


def _simple_tensor_op(spec: OpSpec) -> bool:
    """One input tensor, no outputs, no object lists: all_reduce, broadcast, send, ..."""
    return len(spec.ins) == 1 and spec.ins[0][0] != "*" and not spec.outs and not spec.lists


def _wrap(name: str, fn: Callable, spec: OpSpec) -> Callable:
    if _simple_tensor_op(spec):
        return _wrap_simple(name, fn, spec)
    return _wrap_general(name, fn, spec)


def _wrap_simple(name: str, fn: Callable, spec: OpSpec) -> Callable:
    """The hot path: collectives on one tensor, their arguments read by precomputed getters."""
    kind = _P2P if spec.direction else _COLL
    flags0 = spec.direction
    always_async = name in ("isend", "irecv")
    get_tensor = _getter(spec, spec.ins[0])
    get_group = _getter(spec, "group")
    get_async = _getter(spec, "async_op", False) if "async_op" in spec.params else None
    get_op = _getter(spec, "op") if spec.reduce else None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        if rec is None:
            rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            return fn(*args, **kwargs)
        try:
            group = get_group(args, kwargs)
            is_async = always_async or (get_async is not None and
                                        bool(get_async(args, kwargs)))
            handle = rec.begin(
                name, group, [get_tensor(args, kwargs)], (),
                _reduce_name(get_op(args, kwargs)) if get_op is not None else "",
                flags0 | (_ASYNC if is_async else 0),
                _peer(spec, args, kwargs, group) if spec.peer else -1, kind=kind)
        except Exception as e:  # noqa: BLE001 - recording must never break the call
            rec.fail(f"wrap {name}", e)
            return fn(*args, **kwargs)
        return _call_recorded(rec, fn, args, kwargs, handle, is_async, tid)

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _call_recorded(rec: R.Recorder, fn: Callable, args: tuple, kwargs: dict, handle: int,
                   is_async: bool, tid: int) -> Any:
    """Run the real call with nested calls unrecorded; end the record when it returns
    (or, for async calls, when its Work is waited on)."""
    _inside.add(tid)
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        rec.end(handle, failed=True)
        raise
    finally:
        _inside.discard(tid)
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

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        if rec is None:
            rec = R.active()
        tid = _get_ident()
        if rec is None or tid in _inside:
            return fn(*args, **kwargs)
        try:
            group = spec.arg(args, kwargs, "group")
            ins = _tensors(spec, spec.ins, args, kwargs) if spec.ins else []
            outs = _tensors(spec, spec.outs, args, kwargs) if spec.outs else ()
            for lname in spec.lists:
                lst = spec.arg(args, kwargs, lname)
                ins.append(_Shape(len(lst) if lst is not None else 0))
            is_async = always_async or (has_async and
                                        bool(spec.arg(args, kwargs, "async_op", False)))
            handle = rec.begin(
                name, group, ins, outs,
                _reduce_name(spec.arg(args, kwargs, "op")) if spec.reduce else "",
                flags0 | (_ASYNC if is_async else 0), _peer(spec, args, kwargs, group),
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
                    direction | _ASYNC, int(getattr(p, "peer", -1) or 0), kind=_P2P))
        except Exception as e:  # noqa: BLE001 - recording must never break the call
            rec.fail("wrap batch_isend_irecv", e)
        _inside.add(tid)
        try:
            works = fn(p2p_op_list)
        except BaseException:
            for h in handles:
                rec.end(h, failed=True)
            raise
        finally:
            _inside.discard(tid)
        for work, h in zip(works or [], handles):
            _track_async(rec, work, h)
        return works

    wrapper.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return wrapper


def _patch_work_wait(work_cls: Any) -> None:
    original = work_cls.wait
    if getattr(original, "__ddpdoctor_original__", None):
        return

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = _pending.pop(self, None) if _pending else None
        if done is None:
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **kwargs)
        finally:
            done()  # records t_end (a failed wait still ends the call)
        return result

    wait.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    work_cls.wait = wait


def _wrap_destroy(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        rec = R._recorder
        if rec is not None and not (args or kwargs.get("group")):
            rec.meta("destroy")
        return fn(*args, **kwargs)

    destroy_process_group.__ddpdoctor_original__ = fn  # type: ignore[attr-defined]
    return destroy_process_group


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
    if hasattr(c10d, "batch_isend_irecv"):
        wrapped["batch_isend_irecv"] = _wrap_batch_isend_irecv(c10d.batch_isend_irecv)
    wrapped.update(init_hooks.patched(c10d))
    wrapped["destroy_process_group"] = _wrap_destroy(c10d.destroy_process_group)
    for name, fn in wrapped.items():
        setattr(c10d, name, fn)
        if getattr(dist, name, None) is not None:
            setattr(dist, name, fn)
    _patch_work_wait(c10d.Work)
    dist.__ddpdoctor_patched__ = True
    if dist.is_initialized():  # torch was imported and initialised before us
        init_hooks.on_init()
