"""Calls outside the optimizer that set replicas apart, or that the replica checks key on:
``load_state_dict`` and
``torch.nn.init`` on a tracked DDP's parameters after its construction become
``replica_write`` meta events (with the user's line); LR scheduler steps are counted (with the
line of the last one) and
``clip_grad_norm_``'s max_norm kept by call site, GradScalers watched from their
``update()``, and DDP's join hook counting a joined rank's shadowed iterations, for the
replica checks (runtime/replica_watch.py).  A lookup or two a call, nothing on the training step's path."""

from __future__ import annotations

import functools
import sys
from typing import Any

from ddpdoctor.runtime import optimizer_facts as O
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime import replica_watch as W
from ddpdoctor.runtime.replica_prints import fingerprints

INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
                  "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                  "kaiming_normal_", "orthogonal_", "sparse_")


def _note_write(what: str, names: list[str], tensors: list[Any], rep: W.Replica,
                site: str) -> None:
    """The write, with the prints of what it wrote (ranks that all wrote may still have
    written different values: a re-initialisation from each rank's own random numbers)."""
    rec = R.active()
    if rec is None:
        return
    w = W._watch
    rec.meta("replica_write", ddp=rep.index, what=what, params=names[:16], count=len(names),
             step=w.updates if w is not None else rec.steps, site=site,
             prints=fingerprints(tensors[:16]))


def _wrap_load_state_dict(cls: type) -> None:
    original = cls.load_state_dict
    if getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def load_state_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        w = W._watch
        if w is not None and w.enabled and w.replicas:
            try:
                _loaded(w, self)
            except Exception as e:  # noqa: BLE001 - never into the user's call
                W.disable("noting a load_state_dict", e)
        return result

    load_state_dict.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.load_state_dict = load_state_dict


def _loaded(w: W.ReplicaWatch, module: Any) -> None:
    hits: dict[int, tuple[W.Replica, list[str], list[Any]]] = {}
    for p in module.parameters():
        found = w.tracked_param(p)
        if found is not None:
            rep, i = found
            hit = hits.setdefault(rep.index, (rep, [], []))
            hit[1].append(rep.names[i])
            hit[2].append(p)
    for rep, names, tensors in hits.values():
        _note_write("load_state_dict", names, tensors, rep, R.user_callsite(3))


def _wrap_init(module: Any, name: str) -> None:
    original = getattr(module, name, None)
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(tensor, *args, **kwargs)
        w = W._watch
        if w is not None and w.enabled and w.replicas:
            try:
                found = w.tracked_param(tensor)
                if found is not None:
                    rep, i = found
                    _note_write(f"torch.nn.init.{name}", [rep.names[i]], [tensor], rep,
                                R.user_callsite(2))
            except Exception as e:  # noqa: BLE001 - never into the user's call
                W.disable("noting an init", e)
        return result

    init.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    setattr(module, name, init)


def _wrap_scheduler_step(cls: type) -> None:
    """Count a scheduler's steps and keep the user's line of its last one; the settings it
    writes during the step are noted at that line (runtime/optimizer_facts.py)."""
    original = cls.__dict__.get("step")
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        w = W._watch
        if w is None or not w.enabled:
            return original(self, *args, **kwargs)
        site = ""
        try:
            seen = w.schedulers.get(self)
            if sys._getframe(1).f_code.co_name == "_initial_step":
                if seen is None:  # LRScheduler's constructor steps once: not the user's
                    w.schedulers[self] = [0, ""]
            else:
                site = R.user_callsite(2)
                if seen is None:
                    w.schedulers[self] = [1, site]
                else:
                    seen[0] += 1
                    seen[1] = site
        except Exception as e:  # noqa: BLE001 - never into the user's call
            W.disable("counting scheduler steps", e)
        before, O.writer_site = O.writer_site, site or O.writer_site
        try:
            return original(self, *args, **kwargs)
        finally:
            O.writer_site = before

    step.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.step = step


def _wrap_clip(module: Any, name: str) -> None:
    """Gradient clipping: the user's call site and the max_norm of its last call."""
    original = getattr(module, name, None)
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def clip(parameters: Any, max_norm: Any, *args: Any, **kwargs: Any) -> Any:
        w = W._watch
        if w is not None and w.enabled and w.replicas:
            try:
                caller = sys._getframe(1)
                key = (id(caller.f_code), caller.f_lineno)
                seen = w.clips.get(key)
                if seen is None:
                    seen = w.clips[key] = [R.user_callsite(2), None]
                seen[1] = float(max_norm) if isinstance(max_norm, (int, float)) else None
            except Exception as e:  # noqa: BLE001 - never into the user's call
                W.disable("noting a gradient clip", e)
        return original(parameters, max_norm, *args, **kwargs)

    clip.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    setattr(module, name, clip)


def _wrap_add_param_group(cls: type) -> None:
    """Every param group is watched from the optimizer's construction on (its settings
    noted at the user's line that built it), so that a write before the first step is seen."""
    original = cls.__dict__.get("add_param_group")
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def add_param_group(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            O.watch_new_group(self, R.user_callsite(2))
        except Exception as e:  # noqa: BLE001 - never into the user's call
            W.disable("watching a param group", e)
        return result

    add_param_group.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.add_param_group = add_param_group


def _wrap_scaler_update(cls: type) -> None:
    """A GradScaler's update: the scaler is watched (its scale goes into each check, with
    the user's line of its last update)."""
    original = cls.__dict__.get("update")
    if original is None or getattr(original, "__ddpdoctor_original__", None):
        return

    @functools.wraps(original)
    def update(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        w = W._watch
        if w is not None and w.enabled and w.replicas:
            try:
                w.scalers[self] = R.user_callsite(2)
            except Exception as e:  # noqa: BLE001 - never into the user's call
                W.disable("noting a GradScaler", e)
        return result

    update.__ddpdoctor_original__ = original  # type: ignore[attr-defined]
    cls.update = update


def _wrap_join_hook(cls: type) -> None:
    """DDP's join hook: a joined rank's shadowed iterations count as synced updates
    (runtime/replica_watch.py keys its checks by them)."""
    main, post = cls.__dict__.get("main_hook"), cls.__dict__.get("post_hook")
    if main is None or post is None or getattr(main, "__ddpdoctor_original__", None):
        return

    @functools.wraps(main)
    def main_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        W.shadowed_iteration()
        return main(self, *args, **kwargs)

    @functools.wraps(post)
    def post_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return post(self, *args, **kwargs)
        finally:
            W.join_ended()

    main_hook.__ddpdoctor_original__ = main  # type: ignore[attr-defined]
    post_hook.__ddpdoctor_original__ = post  # type: ignore[attr-defined]
    cls.main_hook, cls.post_hook = main_hook, post_hook


def install() -> None:
    """Hook module loading, nn.init, LR schedulers and DDP's join hook (the optimizer hooks
    are runtime/torch_hooks.py's)."""
    import torch.nn.init as init
    from torch import nn
    from torch.optim import lr_scheduler

    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as clip_grad

    _wrap_load_state_dict(nn.Module)
    _wrap_clip(clip_grad, "clip_grad_norm_")
    utils.clip_grad_norm_ = clip_grad.clip_grad_norm_
    for name in INIT_FUNCTIONS:
        _wrap_init(init, name)
    _wrap_scheduler_step(lr_scheduler.LRScheduler)
    from torch.nn.parallel import distributed as torch_ddp

    from torch.amp import grad_scaler
    from torch.optim import optimizer

    _wrap_add_param_group(optimizer.Optimizer)

    _wrap_scaler_update(grad_scaler.GradScaler)
    join_hook = getattr(torch_ddp, "_DDPJoinHook", None)
    if isinstance(join_hook, type):
        _wrap_join_hook(join_hook)
    plateau = getattr(lr_scheduler, "ReduceLROnPlateau", None)
    if isinstance(plateau, type):
        _wrap_scheduler_step(plateau)
