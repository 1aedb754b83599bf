"""ddpdoctor.ring: the instrumented ring all-reduce, usable on its own like dist.all_reduce."""

from __future__ import annotations

from ddpdoctor.ddp.ring import SEGMENT_BYTES, all_reduce

__all__ = ["SEGMENT_BYTES", "all_reduce"]
