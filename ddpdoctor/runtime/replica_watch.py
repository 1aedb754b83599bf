"""Replica checks: each DDP's parameters (and buffers) fingerprinted after scheduled optimizer
steps, with what could make replicas drift apart, in the rank's meta log.

Every ``DistributedDataParallel`` built under ``ddpdoctor run`` is tracked (``track``; an
FSDP or a model outside DDP is not a replica).  Meta events, one kind per fact:

- ``replica_set``: once per DDP: its index in this process (the order of construction),
  the global ranks of its group, parameter and buffer names (module paths), requires_grad
  at construction, ``broadcast_buffers`` and the user's line that built it;
- ``replica_check``: at each checked step (replica_prints.CheckSchedule), per DDP: prints
  of the parameters after the step, of their gradients as the optimizer took them (None:
  no gradient), of the buffers (``broadcast_buffers=False`` only: else the next forward
  overwrites them with rank 0's), parameter version counts since construction (in-place
  writes), parameters whose requires_grad changed since construction, parameters whose
  gradient was accumulated more than once in the last backward (DDP averages one), the
  optimizers' hyperparameters by param group, LR scheduler steps, GradScalers' scales, and
  the updates since the last check after which the settings changed (``settings``: [update,
  a print of every group's settings], to tell the step from which they differ);
- ``replica_write``: a ``load_state_dict`` or a ``torch.nn.init`` call that wrote to a
  tracked parameter after construction, with the user's line (runtime/replica_writes.py).

Checks are keyed by the rank's synced updates (``step``): its outermost optimizer steps, plus
the iterations it shadowed after joining under ``Join`` (uneven inputs: the others stepped;
DDP's join hook gives every rank the same model when the last rank leaves), so that ranks
whose step counts differ after an uneven epoch still compare the same moment.  A rank takes
no check while it is joined.

Checks are taken where the replicas are meant to agree: after the outermost optimizer step
(runtime/optimizer_steps.py: a ZeroRedundancyOptimizer's after its broadcast, not after
its local step), and, for a DDP whose parameters no hooked optimizer holds (a functional
optimizer, ZeRO's ``overlap_with_ddp``, a hand-written update), as DDP's forward starts
(``at: "forward"``, ``step`` then counting training forwards), until an optimizer holding
them is seen.

Nothing here runs a collective.  A failure notes a runtime error and stops the checks; the
training step is never affected.
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from ddpdoctor.runtime import optimizer_facts as O
from ddpdoctor.runtime import recorder as R
from ddpdoctor.runtime.replica_prints import CheckSchedule, fingerprints

ENV_EVERY = "DDPDOCTOR_REPLICA_EVERY"  # a fixed interval; 0 turns the checks off
BYTES_A_TENSOR = 120  # a check's meta log bytes a tensor, about: prints, grad, version


class _NoHook:
    """What a counting hook becomes in a pickled or copied module: nothing."""

    def __call__(self, *args: Any) -> None:
        return None


class _Hook:
    """A counting hook that calls its Replica while it lives.  The user's module carries
    it (``_forward_pre_hooks``, a parameter's hooks) while armed, so pickling, saving or
    copying the module must not reach the Replica and its weak references: it is
    reduced to a hook that does nothing."""

    __slots__ = ("replica", "method", "args")

    def __init__(self, replica: "Replica", method: str, *args: Any):
        self.replica = weakref.ref(replica)
        self.method = method
        self.args = args

    def __call__(self, *args: Any) -> None:
        replica = self.replica()
        if replica is not None:
            getattr(replica, self.method)(*self.args, *args)

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_NoHook, ())


class Replica:
    """One tracked DDP: weak references to its parameters and buffers, what they were at
    construction, and the accumulation counts of an armed backward."""

    def __init__(self, ddp: Any, index: int):
        self.index = index
        self.ddp = weakref.ref(ddp)
        ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
        module = ddp.module
        seen: set[int] = set()
        self.names: list[str] = []
        params = []
        for name, p in module.named_parameters():
            if name in ignored or id(p) in seen:
                continue
            seen.add(id(p))
            self.names.append(name)
            params.append(p)
        self.params = [weakref.ref(p) for p in params]
        self.ids = {id(p): i for i, p in enumerate(params)}
        self.requires_grad = [bool(p.requires_grad) for p in params]
        self.versions = [p._version for p in params]
        self.broadcast_buffers = bool(getattr(ddp, "broadcast_buffers", True))
        named = [(n, b) for n, b in module.named_buffers() if n not in ignored]
        self.buffer_names = [n for n, _ in named]
        self.buffers = [weakref.ref(b) for _, b in named]
        self.accumulated: list[int] = [0] * len(params)
        self._hooks: list[Any] = []
        self.forwards = 0  # training forwards seen while no optimizer holding them is known
        self.last_forward_at = 0.0
        self._forward_watch: Any = None

    def watch_forwards(self) -> None:
        """Check at DDP's forward until an optimizer holding these parameters steps."""
        ddp = self.ddp()
        if ddp is not None and self._forward_watch is None:
            self._forward_watch = ddp.register_forward_pre_hook(_Hook(self, "_forward_starts"))

    def stop_watching_forwards(self) -> None:
        if self._forward_watch is not None:
            self._forward_watch.remove()
            self._forward_watch = None

    def _forward_starts(self, module: Any, args: Any) -> None:
        forward_check(self)

    def live_params(self) -> list[Any] | None:
        ps = [r() for r in self.params]
        return None if any(p is None for p in ps) else ps

    def arm(self) -> None:
        """Count gradient accumulations per parameter until ``disarm`` (the backward
        before a checked step)."""
        ps = self.live_params()
        if ps is None or self._hooks:
            return
        self.accumulated = [0] * len(ps)
        ddp = self.ddp()
        if ddp is not None:
            self._hooks.append(ddp.register_forward_pre_hook(_Hook(self, "_forward")))
        for i, p in enumerate(ps):
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    _Hook(self, "_accumulated", i)))

    def _forward(self, module: Any, args: Any) -> None:
        self.accumulated = [0] * len(self.accumulated)  # counts are per backward

    def _accumulated(self, i: int, p: Any) -> None:
        self.accumulated[i] += 1

    def disarm(self) -> list[int]:
        """Remove the counting hooks; the parameters accumulated more than once."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        return [i for i, n in enumerate(self.accumulated) if n > 1]


class ReplicaWatch:
    """The process's tracked DDPs, the check schedule, and the optimizers seen stepping."""

    def __init__(self, schedule: CheckSchedule):
        self.schedule = schedule
        self.replicas: list[Replica] = []
        self.made = 0
        self.optimizers: list[Any] = []  # weak references, in the order they first stepped
        self._optimizer_ids: dict[int, Any] = {}  # id -> its weak reference (ids are reused)
        self.forward_schedule = CheckSchedule(schedule.every if schedule.fixed else None)
        self.schedulers: "weakref.WeakKeyDictionary[Any, list[Any]]" = \
            weakref.WeakKeyDictionary()
        self.clips: dict[tuple[int, int], list[Any]] = {}  # call site -> [site, max_norm]
        self.scalers: "weakref.WeakKeyDictionary[Any, str]" = \
            weakref.WeakKeyDictionary()  # GradScaler -> the line of its last update()
        self.grads: dict[int, list[Any]] = {}  # replica index -> grad prints of this step
        self.twice: dict[int, list[int]] = {}
        self.updates = 0  # synced updates: outermost steps and Join-shadowed iterations
        self.settings: list[list[int]] = []  # [update, settings print] where it changed
        self._last_settings: int | None = None
        self.joined = False  # inside Join after this rank ran out of inputs
        self.last_step_at = 0.0
        self.check_cost = 0.0  # seconds the next check has cost so far (arming, gradients)
        self.enabled = True

    def saw_optimizer(self, optimizer: Any) -> None:
        """An outermost step: its optimizer's groups are watched from now on, and the DDPs
        whose parameters it holds are checked at its steps, no longer at their forwards."""
        known = self._optimizer_ids.get(id(optimizer))
        if known is not None and known() is optimizer:
            return
        ref = weakref.ref(optimizer)
        self._optimizer_ids[id(optimizer)] = ref
        self.optimizers = [r for r in self.optimizers if r() is not None] + [ref]
        O.watch_groups(optimizer)
        held = O.param_ids(optimizer)
        for rep in self.replicas:
            if rep._forward_watch is not None and not held.isdisjoint(rep.ids):
                rep.stop_watching_forwards()

    def live_optimizers(self) -> list[Any]:
        live = [ref() for ref in self.optimizers]
        return [opt for opt in live if opt is not None]

    def tracked_param(self, tensor: Any) -> tuple[Replica, int] | None:
        for rep in self.replicas:
            i = rep.ids.get(id(tensor))
            if i is not None and rep.params[i]() is tensor:
                return rep, i
        return None


_watch: ReplicaWatch | None = None


def _schedule_from_env() -> CheckSchedule | None:
    raw = os.environ.get(ENV_EVERY, "").strip()
    if not raw:
        return CheckSchedule()
    every = int(raw) if raw.isdigit() else -1
    return None if every <= 0 else CheckSchedule(every)


def disable(where: str, error: BaseException) -> None:
    w = _watch
    if w is not None:
        w.enabled = False
    rec = R.existing()
    if rec is not None:
        rec.note_error(f"replica checks: {where}", error)


def track(ddp: Any) -> None:
    """Track a DDP just built (called from its constructor); never raises."""
    global _watch
    rec = R.active()
    if rec is None:
        return
    try:
        if _watch is None:
            schedule = _schedule_from_env()
            if schedule is None:
                return
            _watch = ReplicaWatch(schedule)
        w = _watch
        if not w.enabled:
            return
        import torch.distributed as dist

        rep = Replica(ddp, w.made)
        w.made += 1
        w.replicas.append(rep)
        if w.schedule.is_check(w.updates + 1):
            rep.arm()  # the first backward leads to a checked step
        rep.watch_forwards()
        rec.meta("replica_set", ddp=rep.index, ranks=dist.get_process_group_ranks(
            ddp.process_group), params=rep.names, buffers=rep.buffer_names,
            requires_grad=rep.requires_grad, broadcast_buffers=rep.broadcast_buffers,
            site=R.user_callsite(3))
    except Exception as e:  # noqa: BLE001 - the user's DDP must build regardless
        disable("tracking a DDP", e)


# -- optimizer steps -------------------------------------------------------------------------
def before_step(optimizer: Any) -> None:
    """Optimizer pre-step hook: at a checked step, the gradients as the optimizer takes them."""
    w, rec = _watch, R._recorder
    if w is None or rec is None or not w.enabled or not w.replicas:
        return
    try:
        w.saw_optimizer(optimizer)
        if w.joined or not w.schedule.is_check(w.updates + 1):
            return
        t0 = time.perf_counter()
        for rep in w.replicas:
            ps = rep.live_params()
            if ps is None:
                continue
            w.twice[rep.index] = rep.disarm()
            if rep.index not in w.grads:  # the first optimizer of the step sees them all
                w.grads[rep.index] = fingerprints([p.grad for p in ps])
        w.check_cost += time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - see the module docstring
        disable("fingerprinting gradients", e)


def after_step(optimizer: Any, step: int) -> None:
    """Optimizer post-hook of an outermost step: one more synced update, checked at
    scheduled ones (``step``, the rank's optimizer steps, is not the key: see the module's
    docstring)."""
    w, rec = _watch, R._recorder
    if w is None or rec is None or not w.enabled or not w.replicas:
        return
    try:
        w.saw_optimizer(optimizer)
        if w.joined:  # ZeRO's join hook stepping a shadowed iteration: counted there
            return
        w.updates += 1
        printed = O.settings_print(w.live_optimizers())
        if printed != w._last_settings:
            w._last_settings = printed
            w.settings.append([w.updates, printed])
        _checked_update(w, rec, w.updates)
    except Exception as e:  # noqa: BLE001 - see the module docstring
        disable("fingerprinting parameters", e)


def _checked_update(w: ReplicaWatch, rec: R.Recorder, update: int) -> None:
    now = time.perf_counter()
    if w.last_step_at:
        w.schedule.note_step(update, now - w.last_step_at)
    if w.schedule.is_check(update):
        _check(w, rec, update)
        # the whole check: arming the step before, the gradients' prints, this
        w.schedule.note_check(update, w.check_cost + time.perf_counter() - now)
        w.check_cost = 0.0
    if w.schedule.is_check(update + 1):
        armed = time.perf_counter()
        for rep in w.replicas:
            rep.arm()
        w.check_cost += time.perf_counter() - armed
    w.last_step_at = time.perf_counter()


def shadowed_iteration() -> None:
    """DDP's join hook ran an iteration for this joined rank: the others took an update."""
    w = _watch
    if w is not None and w.enabled:
        w.joined = True
        w.updates += 1
        w.last_step_at = 0.0  # a shadowed iteration is no step to time


def join_ended() -> None:
    """The Join context is over: every rank holds the last joiner's model again."""
    w = _watch
    if w is not None:
        w.joined = False


def _check(w: ReplicaWatch, rec: R.Recorder, step: int) -> None:
    optimizers = w.live_optimizers()
    for opt in optimizers:
        O.watch_groups(opt)  # again after a load_state_dict replaced them
    hyper, where = O.hyperparameters(optimizers)
    sched = [{"name": type(s).__name__, "steps": v[0], "site": v[1]}
             for s, v in list(w.schedulers.items())]
    clips = [{"site": site, "max_norm": v} for site, v in list(w.clips.values())]
    scalers = [{"name": type(s).__name__, "scale": float(s.get_scale()), "site": site}
               for s, site in list(w.scalers.items()) if s.is_enabled()]
    alive = []
    for rep in w.replicas:
        ps = rep.live_params()
        if ps is None or rep.ddp() is None:
            continue
        alive.append(rep)
        _log_check(w, rec, rep, ps, step, grads=w.grads.pop(rep.index, None),
                   accumulated_twice=w.twice.pop(rep.index, []), hyper=hyper,
                   group_of=[where.get(id(p), -1) for p in ps], schedulers=sched, clips=clips,
                   scalers=scalers, settings=w.settings)
    w.replicas = alive
    w.grads.clear()
    w.settings = []


def _log_check(w: ReplicaWatch, rec: R.Recorder, rep: Replica, ps: list[Any], step: int,
               **facts: Any) -> None:
    buffers = None
    if not rep.broadcast_buffers:
        bs = [r() for r in rep.buffers]
        buffers = fingerprints(bs) if all(b is not None for b in bs) else None
    w.schedule.note_logged(BYTES_A_TENSOR * (len(ps) + len(rep.buffers)))
    every = facts.pop("every", w.schedule.every)
    rec.meta("replica_check", ddp=rep.index, step=step, every=every,
             params=fingerprints(ps), buffers=buffers,
             versions=[p._version - v for p, v in zip(ps, rep.versions)],
             flipped=[i for i, (p, rg) in enumerate(zip(ps, rep.requires_grad))
                      if bool(p.requires_grad) != rg], **facts)


def forward_check(rep: Replica) -> None:
    """DDP's forward starts on a replica no hooked optimizer holds: count the training
    forward and check at scheduled ones (the updates between forwards are done)."""
    w, rec = _watch, R._recorder
    if w is None or rec is None or not w.enabled:
        return
    try:
        import torch

        if not torch.is_grad_enabled():
            return  # evaluation: not a training step, and not on every rank alike
        k = rep.forwards
        rep.forwards += 1
        now = time.perf_counter()
        if rep.last_forward_at:
            w.forward_schedule.note_step(k, now - rep.last_forward_at)
        if w.forward_schedule.is_check(k):
            ps = rep.live_params()
            if ps is not None:
                _log_check(w, rec, rep, ps, k, at="forward", every=w.forward_schedule.every)
                w.forward_schedule.note_check(k, time.perf_counter() - now)
        rep.last_forward_at = time.perf_counter()
    except Exception as e:  # noqa: BLE001 - see the module docstring
        disable("fingerprinting parameters at a forward", e)


def reset_after_fork() -> None:
    """A forked rank tracks its own DDPs."""
    global _watch
    _watch = None


os.register_at_fork(after_in_child=reset_after_fork)

