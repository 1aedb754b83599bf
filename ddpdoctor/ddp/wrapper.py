"""DistributedDataParallel for library use: torch's own DDP with ddpdoctor's ring comm hook.

It is ``torch.nn.parallel.DistributedDataParallel`` (a subclass: every attribute, ``join``,
``no_sync``, static graph, pickling and ``torch.save`` are torch's), whose buckets are
summed by ddpdoctor's instrumented ring (see ddp/comm_hook.py).  Under ``ddpdoctor run``
the user's own torch DDP gets the same hook without this class.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.nn.parallel.distributed as _torch_ddp_module

from ddpdoctor.ddp import comm_hook

TorchDDP: type = _torch_ddp_module.DistributedDataParallel


def _unpatched(name: str) -> Callable:
    """torch's own method ``name`` (under ``ddpdoctor run`` the class's is a wrapper)."""
    fn = getattr(TorchDDP, name)
    return getattr(fn, "__ddpdoctor_original__", fn)


class DistributedDataParallel(TorchDDP):  # type: ignore[misc, valid-type]
    """torch's DistributedDataParallel whose gradient buckets go through ddpdoctor's ring.
    Takes torch's arguments; see ``torch.nn.parallel.DistributedDataParallel``."""

    _ddpdoctor_hook_mode = comm_hook.HookMode.RING

    def __init__(self, module: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(module, *args, **kwargs)
        comm_hook.attach(self, comm_hook.HookMode.RING)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        comm_hook.attach(self, comm_hook.HookMode.RING)

    def register_comm_hook(self, state: object, hook: Callable) -> None:
        comm_hook.register_user_hook(self, state, hook, _unpatched("register_comm_hook"))

    def _register_builtin_comm_hook(self, comm_hook_type: Any) -> None:
        comm_hook.register_builtin_hook(self, comm_hook_type,
                                        _unpatched("_register_builtin_comm_hook"))
