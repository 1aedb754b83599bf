"""Ring all-reduce over a ProcessGroup's ranks, in the caller's thread, in view.

Every byte moves around the ring, rank to right neighbour, and each send and receive is
recorded as a ring step of the collective that owns it.  Two transports:

- shared-memory links (ddp/shm_link.py, the rings in ddp/shm_ring.py), when every rank
  of the group can reach its neighbours that way (one host): the two rings below,
  streamed slot by slot; on two ranks the gather ring at every size.
- the group's own ``pg.send``/``pg.recv`` (gloo runs them on its own I/O thread; never
  ``torch.distributed.send``, so the runtime that records the user's point-to-point
  calls does not see them), for the rest, with two rings:

- the gather ring, for small tensors (``uses_gather``; on two ranks up to 16 MB): in
  ``n - 1`` steps every rank passes the whole tensor it last received (its own first) to
  its right neighbour, one message a step, then reduces the ``n`` tensors in rank order,
  the same operations on every rank, so the same bits everywhere.  Half the steps of the
  other ring and a quarter of its messages: up to several MB each message's latency
  (gloo's send/recv handshake, thread wake-ups), not the bytes, is the cost.
- the segmented ring, for the rest: a reduce-scatter (``n - 1`` steps: each rank sends
  one chunk to its right neighbour, receives another from its left one and reduces it
  into its own copy) followed by an all-gather (``n - 1`` steps passing the reduced
  chunks on).  Every chunk is cut into equal segments of at most ``SEGMENT_BYTES`` so
  that a segment moves on to the next step as soon as it is reduced (equal: a short last
  segment would cost a whole message's latency for a few bytes).

``all_reduce`` is the drop-in for ``dist.all_reduce``; ``ring_all_reduce_flat`` the
lower-level entry for a flat contiguous buffer and a resolved ProcessGroup.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from ddpdoctor.ddp.ring_plan import (GATHER_BYTES, SEGMENT_BYTES, RingPlan, global_rank,
                                     next_tag_base, step_chunk, uses_gather)
from ddpdoctor.ddp import shm_link
from ddpdoctor.ddp.ring_reduce import ReduceFn, gather_rows, reduce_in_rank_order, scratch
from ddpdoctor.ddp.shm_ring import shm_ring
from ddpdoctor.runtime import recorder

_REDUCERS: dict[str, ReduceFn] = {
    "sum": torch.Tensor.add_,
    "avg": torch.Tensor.add_,
    "product": torch.Tensor.mul_,
    "max": lambda a, b: torch.maximum(a, b, out=a),
    "min": lambda a, b: torch.minimum(a, b, out=a),
    "band": torch.Tensor.bitwise_and_,
    "bor": torch.Tensor.bitwise_or_,
    "bxor": torch.Tensor.bitwise_xor_,
}
_OP_NAMES = {
    dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MAX: "max", dist.ReduceOp.MIN: "min", dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor",
}

def op_name(op: Any) -> str:
    """``"sum"``, ``dist.ReduceOp.SUM`` or ``dist.ReduceOp.RedOpType.SUM`` -> ``"sum"``."""
    if isinstance(op, str):
        name = op.lower()
    else:
        name = _OP_NAMES.get(op, "")
        if not name:
            name = str(op).rsplit(".", 1)[-1].lower()
    if name not in _REDUCERS:
        raise ValueError(f"ring all_reduce does not support the reduce op {op!r}; use one of "
                         f"{', '.join(sorted(_REDUCERS))}")
    return name


class RingTrace:
    """Records a ring's sends and receives as ring steps of the collective ``parent_seq``."""

    def __init__(self, rec: recorder.Recorder, pg: Any, parent_seq: int, bucket: int,
                 left: int, right: int):
        self.rec, self.pg, self.parent, self.bucket = rec, pg, parent_seq, bucket
        self.left, self.right = left, right

    def start(self, send: bool, nbytes: int, step: int, segment: int) -> int:
        return self.rec.ring_step(self.parent, self.pg, send,
                                  self.right if send else self.left, nbytes,
                                  time.time_ns(), 0, step, segment, self.bucket)

    def done(self, handle: int) -> None:
        self.rec.end_step(handle)


def ring_all_reduce_flat(flat: torch.Tensor, pg: Any, op: str = "sum",
                         trace: RingTrace | None = None,
                         segment_bytes: int = SEGMENT_BYTES,
                         gather_bytes: int = GATHER_BYTES,
                         scale: float | None = None) -> None:
    """All-reduce the contiguous 1-d tensor ``flat`` in place over ``pg`` (a ProcessGroup
    object; ranks are group-local).  ``op`` is a name from ``op_name``.

    This is the lower-level entry for callers that already hold a flat buffer and a
    resolved group (the DDP's buckets): it runs the whole ring in the calling thread
    (over shared memory, else posting gloo's own send/recv), and returns when ``flat``
    holds the result on this rank.  Every rank of ``pg`` must call it with the same size,
    dtype and op, in the same order relative to other ring calls on ``pg`` (the tags and
    the links' streams follow that order); the group's first call makes its links, so
    every rank must make it.  Small tensors (``uses_gather``), and on shared memory every
    tensor of a two-rank group, go once around the ring whole and are reduced in rank
    order, so that every rank computes the same bits; larger ones take a segmented
    reduce-scatter + all-gather (in ``segment_bytes`` on gloo, in slots on shared memory).

    ``scale``: the result is multiplied by it where it is final (the gather ring's last
    reduction, the segmented ring's last reduce-scatter step, each segment while it is in
    cache), instead of a pass over the whole input beforehand (a DDP bucket's 1 / n: exactly
    the same bits as scaling first when n is a power of two)."""
    n = pg.size()
    if n > 1 and flat.numel() > 0:
        links = shm_link.links_for(pg)  # the group's first ring call makes them
        gather = uses_gather(flat.numel() * flat.element_size(), n, gather_bytes)
        if links is not None:  # on two ranks the gather ring at every size
            shm_ring(flat, links, n, pg.rank(), _REDUCERS[op], trace, scale, gather or n == 2)
        elif gather:
            _gather_ring(flat, pg, _REDUCERS[op], trace, scale)
        else:
            _Ring(flat, pg, _REDUCERS[op], trace, segment_bytes, scale).run()
    elif scale is not None:
        flat.mul_(scale)
    if op == "avg" and n > 1:
        if flat.is_floating_point() or flat.is_complex():
            flat.div_(n)
        else:
            flat.floor_divide_(n)


def _gather_ring(flat: torch.Tensor, pg: Any, reduce: ReduceFn,
                 trace: RingTrace | None, scale: float | None = None) -> None:
    """The gather ring: in ``n - 1`` steps each rank passes the whole tensor it last
    received (its own first) to its right neighbour, so every rank ends up with all
    ``n`` tensors, then reduces them in rank order ``((x0 . x1) . x2) ...``: the same
    operations on every rank, so the same result bits everywhere.

    Every receive is posted first, so the neighbours hear early that this rank is ready
    for each message, and each step is one message: on this path a message's cost is its
    hand-offs between threads (gloo's I/O thread, this one), each a chance to wait for a
    core, not its bytes, so a step is never cut in parts."""
    n, r = pg.size(), pg.rank()
    right, left = (r + 1) % n, (r - 1) % n
    numel, esize = flat.numel(), flat.element_size()
    nbytes = numel * esize
    base = next_tag_base(pg)
    rows = gather_rows(flat, n)
    recvs: list[tuple[Any, int]] = []
    sends: list[tuple[Any, int]] = []
    try:
        for k in range(n - 1):  # distinct buffers and tags: post every receive at once
            recvs.append((pg.recv([rows[k]], left, base + k),
                          trace.start(False, nbytes, k, 0) if trace else -1))
        src = flat
        for k in range(n - 1):
            sends.append((pg.send([src], right, base + k),
                          trace.start(True, nbytes, k, 0) if trace else -1))
            work, handle = recvs[k]
            work.wait()
            if trace:
                trace.done(handle)
            src = rows[k]
    finally:
        for work, handle in sends:  # flat and the rows are read until their sends are done
            work.wait()
            if trace:
                trace.done(handle)

    reduce_in_rank_order(flat, rows, r, n, reduce, scale)


class _Ring:
    """One ring all-reduce in flight: posts, waits and reduces segment by segment."""

    def __init__(self, flat: torch.Tensor, pg: Any, reduce: ReduceFn,
                 trace: RingTrace | None, segment_bytes: int, scale: float | None = None):
        self.flat, self.pg, self.reduce, self.trace = flat, pg, reduce, trace
        self.scale = scale
        n, r = pg.size(), pg.rank()
        self.plan = RingPlan(flat.numel(), n, r, flat.element_size(), segment_bytes)
        self.n, self.r = n, r
        self.right, self.left = (r + 1) % n, (r - 1) % n
        self.base = next_tag_base(pg)
        self.tmp = scratch(flat.dtype, self.plan.max_chunk)
        self.sends: dict[tuple[int, int], tuple[Any, int]] = {}  # (step, seg) -> work

    # -- posting ---------------------------------------------------------------------
    def _send(self, step: int, chunk: int, seg: int) -> None:
        s, e = self.plan.span(chunk, seg)
        if e == s:
            return
        work = self.pg.send([self.flat[s:e]], self.right, self.plan.tag(self.base, step, seg))
        h = self.trace.start(True, (e - s) * self.flat.element_size(), step, seg) \
            if self.trace is not None else -1
        self.sends[(step, seg)] = (work, h)

    def _recv(self, step: int, chunk: int, seg: int,
              into_tmp: bool) -> tuple[Any, int, torch.Tensor, torch.Tensor] | None:
        s, e = self.plan.span(chunk, seg)
        if e == s:
            return None
        dst = self.flat[s:e]
        buf = self.tmp[s - self.plan.bounds[chunk]: e - self.plan.bounds[chunk]] \
            if into_tmp else dst
        work = self.pg.recv([buf], self.left, self.plan.tag(self.base, step, seg))
        h = self.trace.start(False, (e - s) * self.flat.element_size(), step, seg) \
            if self.trace is not None else -1
        return work, h, buf, dst

    def _wait(self, work: Any, handle: int) -> None:
        work.wait()
        if self.trace is not None:
            self.trace.done(handle)

    def _wait_send(self, step: int, seg: int) -> None:
        entry = self.sends.pop((step, seg), None)
        if entry is not None:
            self._wait(*entry)

    # -- the two phases --------------------------------------------------------------
    def run(self) -> None:
        n, r, nseg = self.n, self.r, self.plan.nseg
        last = n - 2  # index of the last step of each phase
        try:
            pending = []
            for j in range(nseg):  # reduce-scatter step 0
                pending.append(self._recv(0, step_chunk(r, n, 0, False), j, True))
                self._send(0, step_chunk(r, n, 0, True), j)
            for k in range(n - 1):  # reduce-scatter: chunk step_chunk(r, n, k, False) arrives
                nxt = []
                for j in range(nseg):
                    got = pending[j]
                    if got is not None:
                        self._wait(got[0], got[1])
                        self.reduce(got[3], got[2])
                        if k == last and self.scale is not None:
                            got[3].mul_(self.scale)  # final: scaled while in cache
                    if k < last:
                        nxt.append(self._recv(k + 1, step_chunk(r, n, k + 1, False), j, True))
                        self._send(k + 1, step_chunk(r, n, k + 1, True), j)
                    else:  # the chunk just reduced is final: start the all-gather with it
                        self._wait_send(0, j)  # chunk r (sent at step 0) is overwritten
                        nxt.append(self._recv(n - 1, step_chunk(r, n, n - 1, False), j, False))
                        self._send(n - 1, step_chunk(r, n, n - 1, True), j)
                pending = nxt
            for k in range(n - 1):  # all-gather: chunk (r-k) arrives, is passed on
                nxt = []
                for j in range(nseg):
                    got = pending[j]
                    if got is not None:
                        self._wait(got[0], got[1])
                    if k < last:
                        self._wait_send(k + 1, j)  # chunk (r-k-1) was sent at RS step k+1
                        nxt.append(self._recv(n + k, step_chunk(r, n, n + k, False), j, False))
                        self._send(n + k, step_chunk(r, n, n + k, True), j)
                pending = nxt
        finally:
            for key in list(self.sends):
                self._wait_send(*key)


def resolve_group(group: Any) -> Any:
    """The ProcessGroup object for ``group`` (None = the default group)."""
    if group is None:
        return dist.distributed_c10d._get_default_group()
    return group


def all_reduce(tensor: torch.Tensor, op: Any = "sum", group: Any = None) -> None:
    """All-reduce ``tensor`` in place over ``group`` with a segmented ring, like
    ``dist.all_reduce(tensor, op, group)``; ``op`` may also be ``"avg"`` on gloo."""
    name = op_name(op)
    pg = resolve_group(group)
    if dist.distributed_c10d._rank_not_in_group(pg):
        return
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    rec = recorder.active()
    trace, handle = None, -1
    if rec is not None:
        handle = rec.begin("all_reduce", group, ins=[tensor], reduce_op=name,
                           callsite=recorder.user_callsite())
        trace = ring_trace(rec, group, pg, handle, -1)
    try:
        ring_all_reduce_flat(flat, pg, name, trace)
    except BaseException:
        if rec is not None:
            rec.end(handle, failed=True)
        raise
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view(tensor.shape))
    if rec is not None:
        rec.end(handle)


def ring_trace(rec: recorder.Recorder, group: Any, pg: Any, handle: int,
               bucket: int) -> RingTrace | None:
    """A RingTrace for the collective recorded under ``handle`` (None if not recorded)."""
    if handle < 0:
        return None
    n, r = pg.size(), pg.rank()
    return RingTrace(rec, group, rec.last_seq_of(handle), bucket,
                     global_rank(pg, (r - 1) % n), global_rank(pg, (r + 1) % n))
