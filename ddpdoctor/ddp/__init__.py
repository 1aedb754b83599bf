"""ddpdoctor.ddp: an instrumented DistributedDataParallel and its ring all-reduce."""

from __future__ import annotations

from typing import Any

__all__ = ["DistributedDataParallel", "all_reduce"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `import ddpdoctor.ddp.buckets` does not pull in the whole wrapper.
    if name == "DistributedDataParallel":
        from ddpdoctor.ddp.wrapper import DistributedDataParallel

        return DistributedDataParallel
    if name == "all_reduce":
        from ddpdoctor.ddp.ring import all_reduce

        return all_reduce
    raise AttributeError(f"module 'ddpdoctor.ddp' has no attribute {name!r}")
