"""ddpdoctor.ring: the instrumented ring all-reduce, usable on its own like dist.all_reduce."""

from __future__ import annotations

from ddpdoctor.ddp.ring import GATHER_BYTES, SEGMENT_BYTES, all_reduce, ring_all_reduce_flat

__all__ = ["GATHER_BYTES", "SEGMENT_BYTES", "all_reduce", "ring_all_reduce_flat"]
