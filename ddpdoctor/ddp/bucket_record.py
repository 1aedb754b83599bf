"""A DDP bucket's record: one logical all_reduce (BUCKET flag, bucket index in aux)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ddpdoctor.runtime import recorder
from ddpdoctor.trace import layout as L

BUCKET_FLAG = int(L.RecordFlag.BUCKET)


def group_arg(pg: Any) -> Any:
    """None for the default group, so that records name it as the user's calls do."""
    try:
        if pg is None or pg is dist.distributed_c10d._get_default_group():
            return None
    except (RuntimeError, ValueError):
        return pg
    return pg


def begin(group: Any, buf: torch.Tensor, index: int) -> int:
    """Record entering bucket ``index``'s all-reduce of ``buf`` over ``group`` (the user's
    call site is the frame that runs backward); a handle for ``end``, -1 when not recording."""
    rec = recorder.active()
    if rec is None:
        return -1
    return rec.begin("all_reduce", group, ins=[buf], reduce_op="avg", flags=BUCKET_FLAG,
                     aux=index, callsite=recorder.call_sites(2))


def end(handle: int, failed: bool = False) -> None:
    """Record that the bucket's all-reduce of ``handle`` completed (or ``failed``)."""
    rec = recorder.existing()
    if rec is not None and handle >= 0:
        rec.end(handle, failed=failed)


def pass_through(handle: int, fut: torch.futures.Future) -> Any:
    """A ``.then`` callback: end the record of ``handle`` as ``fut`` ended; ``fut``'s value."""
    try:
        value = fut.value()
    except BaseException:
        end(handle, failed=True)
        raise
    end(handle)
    return value
