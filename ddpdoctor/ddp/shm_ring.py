"""The ring over shared-memory links, piece by piece: each piece reduced straight out of its slot.

The rings of ``ring.py`` (the gather ring: ``n - 1`` steps passing whole tensors, then
the reduction in rank order; the segmented ring: a reduce-scatter and an all-gather of
chunks), but every step streams through the link's slots: a slot's worth of bytes (a
piece) is copied in, the neighbour is told, and it reduces or keeps that piece while the
next one is copied.  A piece of step ``k`` goes on once its bytes have arrived at step
``k - 1``.  Sending and receiving interleave in one loop, so no rank waits for a free
slot while holding back the piece its left neighbour waits for.
"""

from __future__ import annotations

from typing import Any

import torch

from ddpdoctor.ddp.ring_plan import chunk_bounds, segment_span, step_chunk
from ddpdoctor.ddp.ring_reduce import ReduceFn, gather_rows, reduce_in_rank_order
from ddpdoctor.ddp.shm_link import CREDIT, DATA, SLOT_BYTES, LinkBroken, Links


def shm_ring(flat: torch.Tensor, links: Links, n: int, r: int, reduce: ReduceFn,
             trace: Any, scale: float | None, gather: bool) -> None:
    """All-reduce the contiguous 1-d ``flat`` in place around the ring ``links`` belong to
    (``n`` ranks, this one ``r``), by the gather ring (``gather``) or the segmented one;
    ``trace`` is a ``ring.RingTrace`` or None.  After an error the links stay broken."""
    plan: _Gather | _Segmented = _Gather(flat, n, reduce, scale) if gather else \
        _Segmented(flat, n, r, reduce, scale)
    with links.lock:
        if links.broken:
            raise LinkBroken(links.broken)
        try:
            _Stream(plan, links, trace).run()
        except BaseException as exc:
            links.broken = links.broken or str(exc) or type(exc).__name__
            raise
    if gather and n > 2:
        reduce_in_rank_order(flat, gather_rows(flat, n), r, n, reduce, scale)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


class _Gather:
    """The gather ring's pieces: step ``k`` passes the whole tensor received at ``k - 1``
    (this rank's own at step 0).  On two ranks a piece is reduced into this rank's tensor
    as it arrives (``in_place``: not before this rank's same piece has gone out); on more
    it is kept in a row, and the rows are reduced in rank order at the end."""

    def __init__(self, flat: torch.Tensor, n: int, reduce: ReduceFn, scale: float | None):
        self.flat, self.reduce, self.scale = flat, reduce, scale
        self.esize = flat.element_size()
        self.nbytes = flat.numel() * self.esize
        self.seg = SLOT_BYTES
        self.nseg = -(-self.nbytes // self.seg)
        self.steps = n - 1
        self.in_place = n == 2
        self.own = _bytes(flat)
        self.rows = None if n == 2 else _bytes(gather_rows(flat, n)).view(n - 1, self.nbytes)

    def step_bytes(self, k: int, send: bool) -> int:
        return self.nbytes

    def _span(self, j: int) -> tuple[int, int]:
        s = j * self.seg
        return s, min(self.nbytes, s + self.seg)

    def source(self, k: int, j: int) -> torch.Tensor:
        s, e = self._span(j)
        return (self.own if k == 0 else self.rows[k - 1])[s:e]  # type: ignore[index]

    def take(self, k: int, j: int, slot: torch.Tensor) -> None:
        s, e = self._span(j)
        piece = slot[:e - s]
        if self.rows is None:  # two ranks: reduce in place, scale while in cache
            mine = self.flat[s // self.esize:e // self.esize]
            self.reduce(mine, piece.view(self.flat.dtype))
            if self.scale is not None:
                mine.mul_(self.scale)
        else:
            self.rows[k][s:e].copy_(piece)


class _Segmented:
    """The segmented ring's pieces: chunk ``c`` of ``n``, cut into ``nseg`` slot-sized
    segments (empty ones travel too, so both ends count alike).  Reduce-scatter steps
    ``k < n - 1`` send chunk ``r - k`` and reduce chunk ``r - k - 1`` into this rank's
    tensor (scaled at the last one, where it is final); all-gather steps send the chunk
    that became final and copy in the one that arrives.  The same operations, in the same
    order, as ``ring._Ring``: the same bits."""

    in_place = False

    def __init__(self, flat: torch.Tensor, n: int, r: int, reduce: ReduceFn,
                 scale: float | None):
        self.flat, self.n, self.r, self.reduce, self.scale = flat, n, r, reduce, scale
        self.esize = flat.element_size()
        self.bounds = chunk_bounds(flat.numel(), n)
        self.seg = max(1, SLOT_BYTES // self.esize)  # elements a piece
        max_chunk = -(-flat.numel() // n)
        self.nseg = max(1, -(-max_chunk // self.seg))
        self.steps = 2 * (n - 1)
        self.own = _bytes(flat)

    def _chunk(self, k: int, send: bool) -> int:
        return step_chunk(self.r, self.n, k, send)

    def step_bytes(self, k: int, send: bool) -> int:
        c = self._chunk(k, send)
        return (self.bounds[c + 1] - self.bounds[c]) * self.esize

    def source(self, k: int, j: int) -> torch.Tensor:
        s, e = segment_span(self.bounds, self.seg, self._chunk(k, True), j)
        return self.own[s * self.esize:e * self.esize]

    def take(self, k: int, j: int, slot: torch.Tensor) -> None:
        s, e = segment_span(self.bounds, self.seg, self._chunk(k, False), j)
        mine = self.flat[s:e]
        piece = slot[:(e - s) * self.esize]
        if k < self.n - 1:
            self.reduce(mine, piece.view(self.flat.dtype))
            if k == self.n - 2 and self.scale is not None:
                mine.mul_(self.scale)
        else:
            mine.copy_(piece.view(self.flat.dtype))


class _Stream:
    """One call's pieces in flight, in order on each link: piece ``g`` is step
    ``g // nseg``, segment ``g % nseg``."""

    def __init__(self, plan: _Gather | _Segmented, links: Links, trace: Any):
        self.plan, self.links, self.trace = plan, links, trace
        self.nseg = plan.nseg
        self.total = plan.steps * plan.nseg
        self.nbytes = plan.flat.numel() * plan.esize  # every piece says it: a size check
        self.sent = self.got = 0
        self.send_h = -1
        self.recv_h: list[int] = []

    def run(self) -> None:
        links, total, trace, plan = self.links, self.total, self.trace, self.plan
        if trace is not None:
            self.recv_h = [trace.start(False, plan.step_bytes(k, False), k, 0)
                           for k in range(plan.steps)]
        while self.got < total or self.sent < total:
            self._send_ready()
            while links.arrived and self.got < (self.sent if plan.in_place else total):
                self._take(links.arrived.popleft())
            if (self.got < total or self.sent < total) and not self._can_send():
                links.wait(self.sent < total, self.got < total)

    def _can_send(self) -> bool:
        g = self.sent
        return (g < self.total and self.links.credits > 0
                and (g < self.nseg or self.got > g - self.nseg))

    def _send_ready(self) -> None:
        links, plan, trace = self.links, self.plan, self.trace
        while self._can_send():
            k, j = divmod(self.sent, self.nseg)
            src = plan.source(k, j)
            off = links.slot(links.out_next)
            links.out_slots[off:off + src.numel()].copy_(src)
            if trace is not None and j == 0:
                self.send_h = trace.start(True, plan.step_bytes(k, True), k, 0)
            links.out.post(DATA, self.nbytes)
            links.out_next += 1
            links.credits -= 1
            self.sent += 1
            if trace is not None and j == self.nseg - 1:
                trace.done(self.send_h)

    def _take(self, value: int) -> None:
        links = self.links
        if value != self.nbytes:
            raise LinkBroken(f"ring all_reduce: rank {links.into.peer} reduces a tensor of "
                             f"{value} bytes where this rank has {self.nbytes} (the ranks "
                             f"called in a different order or with different tensors)")
        k, j = divmod(self.got, self.nseg)
        off = links.slot(links.in_next)
        self.plan.take(k, j, links.in_slots[off:off + SLOT_BYTES])
        links.into.post(CREDIT)
        links.in_next += 1
        self.got += 1
        if self.recv_h and j == self.nseg - 1:
            self.trace.done(self.recv_h[k])
