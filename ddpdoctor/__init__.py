"""ddpdoctor: finds out why a PyTorch DDP job hangs, crashes or silently trains wrong."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["DistributedDataParallel", "hookimpl", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily: `import ddpdoctor` must not import torch.
    if name == "DistributedDataParallel":
        from ddpdoctor.ddp.wrapper import DistributedDataParallel

        return DistributedDataParallel
    if name == "hookimpl":
        from ddpdoctor.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'ddpdoctor' has no attribute {name!r}")
