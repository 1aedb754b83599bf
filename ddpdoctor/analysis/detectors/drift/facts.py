"""The replica checks of a job as typed facts: each DDP's names (``ReplicaSet``), each rank's
prints at a checked step (``Check``) and writes outside the optimizer (``Write``), read from
the meta events of runtime/replica_watch.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.model import JobView
from ddpdoctor.trace.origin import Origin

Print = tuple[int, float | None]  # (bits, norm): see runtime/replica_prints.py


@dataclass(frozen=True)
class ReplicaSet:
    """One DDP as a rank built it: ``ddp`` its index in the rank's process (the order of
    construction), ``ranks`` its group's global ranks, and its parameters and buffers."""

    rank: int
    ddp: int
    ranks: tuple[int, ...]
    params: tuple[str, ...]
    buffers: tuple[str, ...] = ()
    broadcast_buffers: bool = True
    site: str = ""
    requires_grad: tuple[bool, ...] = ()  # at construction: the parameters DDP reduces


@dataclass(frozen=True)
class HyperRow:
    """One param group's scalar settings (lr, weight_decay, momentum, betas...), and where
    known the user's lines that changed a setting, the latest last (``sites``)."""

    optimizer: str
    group: int
    settings: tuple[tuple[str, Any], ...]
    sites: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def sites_of(self, setting: str) -> tuple[str, ...]:
        return dict(self.sites).get(setting, ())


@dataclass(frozen=True)
class SchedulerSteps:
    name: str
    steps: int
    site: str = ""


@dataclass(frozen=True)
class Check:
    """One rank's prints of one DDP after optimizer step ``step``.

    params / grads / buffers: a print per name (None: not taken; a grad print None: the
    parameter had no gradient). versions: in-place writes since construction. flipped:
    parameters whose requires_grad changed since construction. twice: parameters whose
    gradient was accumulated more than once in the backward before the step. group_of:
    each parameter's row in ``hyper`` (-1: in no optimizer seen). at: ``step`` (after the
    optimizer step ``step``) or ``forward`` (as DDP's training forward ``step`` began: no
    hooked optimizer holds the parameters).
    """

    rank: int
    ddp: int
    step: int
    params: tuple[Print | None, ...]
    grads: tuple[Print | None, ...] | None = None
    buffers: tuple[Print | None, ...] | None = None
    versions: tuple[int, ...] = ()
    flipped: tuple[int, ...] = ()
    twice: tuple[int, ...] = ()
    hyper: tuple[HyperRow, ...] = ()
    group_of: tuple[int, ...] = ()
    schedulers: tuple[SchedulerSteps, ...] = ()
    clips: tuple[tuple[str, float | None], ...] = ()  # (site, last max_norm) of grad clipping
    t_ns: int = 0  # when the check was taken, on the rank's clock (0: not known)
    at: str = "step"
    scalers: tuple[tuple[str, float, str], ...] = ()  # GradScalers: name, scale, update site
    settings: tuple[tuple[int, int], ...] = ()  # (update, settings print) where they changed


@dataclass(frozen=True)
class Write:
    """A load_state_dict or torch.nn.init call on tracked parameters after construction."""

    rank: int
    ddp: int
    what: str
    params: tuple[str, ...]
    step: int
    site: str = ""
    prints: tuple[Print | None, ...] = ()  # of what it wrote, per parameter (up to 16)


@dataclass
class ReplicaFacts:
    """Everything the replica checks recorded, per rank."""

    sets: dict[int, list[ReplicaSet]] = field(default_factory=dict)
    checks: dict[int, list[Check]] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)
    # each rank's synced backward passes (DDP's first bucket issued), when each began
    passes: dict[int, list[int]] = field(default_factory=dict)


def _prints(value: Any) -> tuple[Print | None, ...] | None:
    if not isinstance(value, list):
        return None
    out: list[Print | None] = []
    for p in value:
        if isinstance(p, list) and len(p) == 2 and type(p[0]) is int:
            out.append((p[0], float(p[1]) if isinstance(p[1], (int, float)) else None))
        else:
            out.append(None)
    return tuple(out)


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(v for v in value if type(v) is int) if isinstance(value, list) else ()


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _hyper(value: Any) -> tuple[HyperRow, ...]:
    rows = []
    for row in value if isinstance(value, list) else ():
        if isinstance(row, dict):
            settings = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                    for k, v in row.items()
                                    if k not in ("optimizer", "group", "sites")))
            sites = row.get("sites")
            rows.append(HyperRow(str(row.get("optimizer", "")), int(row.get("group") or 0),
                                 settings, _sites(sites)))
    return tuple(rows)


def _sites(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        return ()
    return tuple(sorted((str(k), tuple(str(s) for s in (v if isinstance(v, list) else [v])
                                       if s)) for k, v in value.items()))


def _schedulers(value: Any) -> tuple[SchedulerSteps, ...]:
    return tuple(SchedulerSteps(str(s.get("name", "")), int(s.get("steps") or 0),
                                str(s.get("site") or ""))
                 for s in (value if isinstance(value, list) else ()) if isinstance(s, dict))


def _scalers(value: Any) -> tuple[tuple[str, float, str], ...]:
    return tuple((str(s.get("name") or ""), float(s["scale"]), str(s.get("site") or ""))
                 for s in (value if isinstance(value, list) else ())
                 if isinstance(s, dict) and isinstance(s.get("scale"), (int, float)))


def _clips(value: Any) -> tuple[tuple[str, float | None], ...]:
    return tuple((str(c.get("site") or ""), float(c["max_norm"]) if isinstance(
        c.get("max_norm"), (int, float)) else None)
        for c in (value if isinstance(value, list) else ()) if isinstance(c, dict))


def check_from_event(rank: int, ev: dict[str, Any]) -> Check | None:
    params = _prints(ev.get("params"))
    if params is None or type(ev.get("step")) is not int or type(ev.get("ddp")) is not int:
        return None
    return Check(rank, ev["ddp"], ev["step"], params, _prints(ev.get("grads")),
                 _prints(ev.get("buffers")), _ints(ev.get("versions")),
                 _ints(ev.get("flipped")), _ints(ev.get("accumulated_twice")),
                 _hyper(ev.get("hyper")), tuple(v if type(v) is int else -1 for v in
                                                ev.get("group_of") or []),
                 _schedulers(ev.get("schedulers")), _clips(ev.get("clips")),
                 ev["t"] if type(ev.get("t")) is int else 0,
                 "forward" if ev.get("at") == "forward" else "step",
                 _scalers(ev.get("scalers")),
                 tuple((u, v) for u, v in (x for x in ev.get("settings") or ()
                                           if isinstance(x, list) and len(x) == 2)
                       if type(u) is int and type(v) is int))


def replica_facts(job: JobView) -> ReplicaFacts:
    """The facts of every rank's meta log (malformed events are skipped)."""
    facts = ReplicaFacts()
    for rank, run in job.ranks.items():
        for ev in run.trace.meta_events("replica_set"):
            if type(ev.get("ddp")) is int:
                facts.sets.setdefault(rank, []).append(ReplicaSet(
                    rank, ev["ddp"], _ints(ev.get("ranks")), _strs(ev.get("params")),
                    _strs(ev.get("buffers")), bool(ev.get("broadcast_buffers", True)),
                    str(ev.get("site") or ""),
                    tuple(bool(v) for v in ev.get("requires_grad") or [])))
        for ev in run.trace.meta_events("replica_check"):
            check = check_from_event(rank, ev)
            if check is not None:
                facts.checks.setdefault(rank, []).append(check)
        passes = sorted(c.t_start for calls in run.calls.values() for c in calls
                        if c.origin == Origin.DDP_BACKWARD and c.aux == 0)
        if passes:
            facts.passes[rank] = passes
        for ev in run.trace.meta_events("replica_write"):
            if type(ev.get("ddp")) is int:
                facts.writes.append(Write(rank, ev["ddp"], str(ev.get("what", "")),
                                          _strs(ev.get("params")), int(ev.get("step") or 0),
                                          str(ev.get("site") or ""),
                                          _prints(ev.get("prints")) or ()))
    return facts
