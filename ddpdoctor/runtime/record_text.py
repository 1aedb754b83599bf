"""The text of a record: ``in_shapes|out_shapes|dtypes|callsite[|framework_site[|origin]]``."""

from __future__ import annotations

from typing import Any, Sequence

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import format_shapes


def dtype_name(t: Any) -> str:
    return str(t.dtype)[6:]


_DESCRIBE_CACHE: dict[tuple, tuple[bytes, int]] = {}
_DESCRIBE_CACHE_MAX = 4096


def describe(ins: Sequence[Any], outs: Sequence[Any], callsite: str) -> tuple[bytes, int]:
    """The record text ``in_shapes|out_shapes|dtypes|callsite[|framework_site]`` and the
    input numel.  Cached by (shapes, dtypes, call site): a training loop repeats a few."""
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
    raw = record_text(format_shapes([tuple(t.shape) for t in ins[:8]]),
                      format_shapes([tuple(t.shape) for t in outs[:8]]), dtypes, callsite)
    if len(_DESCRIBE_CACHE) >= _DESCRIBE_CACHE_MAX:
        _DESCRIBE_CACHE.clear()
    _DESCRIBE_CACHE[key] = (raw, numel)
    return raw, numel


def record_text(ins: str, outs: str, dtypes: str, sites: str) -> bytes:
    """The text field, fitted to ``TEXT_SIZE``: the call sites and the origin letter are
    kept (the framework site shortened first), then the shapes cut, then the user's path
    from its left."""
    head_ins, head_outs = ins.encode(), outs.encode()
    tail = f"|{dtypes}|{sites}".encode()
    size = L.TEXT_SIZE
    if len(head_ins) + len(head_outs) + 1 + len(tail) <= size:
        return head_ins + b"|" + head_outs + tail
    user, _, fw = sites.partition("|")
    fw, _, origin = fw.partition("|")
    fw = "/".join(fw.rsplit("/", 2)[-2:])  # its package dir and file:line
    last = f"|{fw}|{origin}" if origin else f"|{fw}" if fw else ""
    tail = f"|{dtypes[:24]}|{user}{last}".encode()
    if len(tail) > size - 16:
        last = f"||{origin}" if origin else ""
        tail = f"|{dtypes[:24]}|".encode()
        tail += user.encode()[-(size - 16 - len(tail) - len(last)):] + last.encode()
    room = size - len(tail) - 1
    if len(head_ins) + len(head_outs) > room:
        head_outs = head_outs[: room // 2]
        head_ins = head_ins[: room - len(head_outs)]
    return head_ins + b"|" + head_outs + tail
