"""Hooks into torch beyond torch.distributed: optimizer steps (the outermost counted, and the
replica checks of runtime/replica_watch.py) and mp.spawn's rank wrapper."""

from __future__ import annotations

import functools
from typing import Any, Callable

from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime import optimizer_steps, replica_watch


def _count_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    rec = R._recorder
    if rec is None or not optimizer_steps.left():  # an inner step (ZeRO's local one)
        return
    rec.steps += 1
    rec.set_step(rec.steps)
    replica_watch.after_step(optimizer, rec.steps)


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if R._recorder is not None and optimizer_steps.entered(optimizer):
        replica_watch.before_step(optimizer)


def _patch_spawn_wrap() -> None:
    """mp.spawn's children catch the rank's exception themselves (no sys.excepthook): record it
    before torch's own wrapper reports it to the parent."""
    import sys

    import torch.multiprocessing.spawn  # noqa: F401  (the module, not the function)

    spawn = sys.modules["torch.multiprocessing.spawn"]
    original = spawn._wrap
    if getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def _wrap(fn: Callable, i: int, args: Any, error_file: Any) -> Any:
        @functools.wraps(fn)
        def recording_fn(index: int, *a: Any) -> Any:
            try:
                from ddpdoctor.runtime.init_hooks import on_spawn_child

                on_spawn_child(index)
            except Exception as e:  # noqa: BLE001 - the rank's function must run regardless
                rec = R.existing()
                if rec is not None:
                    rec.note_error("creating the rank's trace at spawn", e)
            try:
                return fn(index, *a)
            except BaseException as e:
                if not isinstance(e, (SystemExit, KeyboardInterrupt)):
                    from ddpdoctor.runtime.process_hooks import record_exception

                    record_exception(type(e), e, e.__traceback__, "main")
                raise

        return original(recording_fn, i, args, error_file)

    _wrap.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    spawn._wrap = _wrap


def install() -> None:
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    register_optimizer_step_pre_hook(_before_step)
    register_optimizer_step_post_hook(_count_step)
    _patch_spawn_wrap()
