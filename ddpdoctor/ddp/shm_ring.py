"""The gather ring over shared-memory links: slot by slot, reduced straight out of the slot.

The same ring as ``ring._gather_ring`` (``n - 1`` steps, each rank passing the whole
tensor it last received, its own first, to its right neighbour; then the reduction in
rank order), but each step streams through the link's slots: a slot's worth of bytes is
copied in, the neighbour is told, and it reduces (two ranks) or keeps (more ranks) that
piece while the next one is copied.  Sending and receiving interleave in one loop, so
no rank waits for a free slot while holding back the slot its left neighbour needs.
"""

from __future__ import annotations

from typing import Any

import torch

from ddpdoctor.ddp.ring_reduce import ReduceFn, reduce_in_rank_order, scratch
from ddpdoctor.ddp.shm_link import CREDIT, DATA, SLOT_BYTES, LinkBroken, Links


def shm_gather_ring(flat: torch.Tensor, links: Links, n: int, r: int, reduce: ReduceFn,
                    trace: Any, scale: float | None) -> None:
    """All-reduce the contiguous 1-d ``flat`` in place around the ring ``links`` belong to
    (``n`` ranks, this one ``r``); ``trace`` is a ``ring.RingTrace`` or None."""
    with links.lock:
        if links.broken:
            raise LinkBroken(links.broken)
        try:
            _Stream(flat, links, n, reduce, trace, scale).run()
        except BaseException as exc:
            links.broken = links.broken or f"{exc}"
            raise
    if n > 2:
        reduce_in_rank_order(flat, _rows(flat, n), r, n, reduce, scale)


def _rows(flat: torch.Tensor, n: int) -> torch.Tensor:
    numel = flat.numel()
    return scratch(flat.dtype, (n - 1) * numel).view(n - 1, numel)  # row k: rank r-k-1


class _Stream:
    """One call's pieces in flight: piece ``g`` is step ``g // nseg``, segment ``g % nseg``."""

    def __init__(self, flat: torch.Tensor, links: Links, n: int, reduce: ReduceFn,
                 trace: Any, scale: float | None):
        self.flat, self.links, self.n = flat, links, n
        self.reduce, self.trace, self.scale = reduce, trace, scale
        self.esize = flat.element_size()
        self.nbytes = flat.numel() * self.esize
        self.seg = SLOT_BYTES // 16 * 16  # a whole number of elements of any dtype
        self.nseg = -(-self.nbytes // self.seg)
        self.total = (n - 1) * self.nseg
        self.own = flat.view(-1).view(torch.uint8) if flat.dtype != torch.uint8 else flat
        self.rows = _rows(flat, n).view(torch.uint8).view(n - 1, self.nbytes) \
            if n > 2 else None
        self.sent = self.got = 0
        self.send_h = self.recv_h = -1

    def run(self) -> None:
        links, total = self.links, self.total
        trace = self.trace
        recv_h = [trace.start(False, self.nbytes, k, 0) for k in range(self.n - 1)] \
            if trace is not None else None
        while self.got < total or self.sent < total:
            self._send_ready()
            while links.arrived and self.got < (total if self.n > 2 else self.sent):
                self._take(links.arrived.popleft())
                if recv_h is not None and self.got % self.nseg == 0:
                    trace.done(recv_h[self.got // self.nseg - 1])
            if (self.got < total or self.sent < total) and not self._can_send():
                links.wait(self.sent < total, self.got < total)

    def _can_send(self) -> bool:
        g = self.sent
        return (g < self.total and self.links.credits > 0
                and (g < self.nseg or self.got > g - self.nseg))

    def _span(self, g: int) -> tuple[int, int, int]:
        k, j = divmod(g, self.nseg)
        s = j * self.seg
        return k, s, min(self.nbytes, s + self.seg)

    def _send_ready(self) -> None:
        links = self.links
        while self._can_send():
            k, s, e = self._span(self.sent)
            src = self.own if k == 0 else self.rows[k - 1]
            off = links.slot(links.out_next)
            links.out_slots[off:off + e - s].copy_(src[s:e])
            if self.trace is not None and s == 0:
                self.send_h = self.trace.start(True, self.nbytes, k, 0)
            links.out.post(DATA, self.nbytes)
            links.out_next += 1
            links.credits -= 1
            self.sent += 1
            if self.trace is not None and e == self.nbytes:
                self.trace.done(self.send_h)

    def _take(self, value: int) -> None:
        links = self.links
        if value != self.nbytes:
            raise LinkBroken(f"ring all_reduce: rank {links.into.peer} reduces a tensor of "
                             f"{value} bytes where this rank has {self.nbytes} (the ranks "
                             f"called in a different order or with different tensors)")
        k, s, e = self._span(self.got)
        off = links.slot(links.in_next)
        piece = links.in_slots[off:off + e - s]
        if self.n == 2:  # the whole ring in one step: reduce in place, scale while in cache
            mine = self.flat[s // self.esize:e // self.esize]
            self.reduce(mine, piece.view(self.flat.dtype))
            if self.scale is not None:
                mine.mul_(self.scale)
        else:
            self.rows[k][s:e].copy_(piece)
        links.into.post(CREDIT)
        links.in_next += 1
        self.got += 1
