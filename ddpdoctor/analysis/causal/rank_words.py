"""The words a finding uses of a rank and a wait: where a rank is instead of in the call
(its frame, what the OS says it is blocked in), who waits for whom in what."""

from __future__ import annotations

import datetime as dt

from ddpdoctor.analysis.causal.graph import Wait
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.load.user_source import source_line
from ddpdoctor.analysis.model import Call, rank_groups, ranks_text
from ddpdoctor.trace.record import short_site


def utc_clock(ns: int) -> str:
    """``10:18:20.509 UTC`` of a wall-clock time in ns."""
    moment = dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"

def frame_text(s: RankState) -> str:
    """``eval.py:88 `score = evaluate(model)``` (or "" without a stack)."""
    if not s.frame:
        return ""
    src = source_line(s.frame)
    return short_site(s.frame) + (f" `{src}`" if src else "") + \
        (f" in {s.frame_name}" if s.frame_name and not src else "")


def after_call(s: RankState) -> str:
    c = s.call
    return f"after seq {c.seq} ({c.describe()} at {c.short_site})" if c else \
        "before its first collective"


def blocked_text(s: RankState) -> str:
    """``blocked in flock (a file lock)`` for a rank the OS says waits in a system call."""
    return f"blocked in {s.blocked_on}" + (f" ({s.blocked_meaning})" if s.blocked_meaning
                                            else "") if s.blocked_on else ""


def whereabouts(s: RankState) -> str:
    """Where a rank that others wait for is instead, in a few words."""
    at = frame_text(s)
    at = f" at {at}" if at else ""
    if s.kind == StateKind.OS_BLOCKED:
        return f"is {blocked_text(s)}{at}, using no CPU"
    if s.kind == StateKind.UNSEEN and s.call is None:
        return "left no flight recorder dump among those read: nothing tells where it is"
    if s.kind == StateKind.UNSEEN:
        return (f"issued no collective {after_call(s)}; its dump does not say where it is "
                "instead")
    if s.kind == StateKind.COMPUTING:
        busy = {True: " (its CPU time advances)",
                False: " (no CPU progress: sleeping, polling, or waiting on I/O or a lock)"}
        return f"is computing{at}{busy.get(s.cpu_busy, '')}"  # type: ignore[arg-type]
    if s.kind == StateKind.DATA_LOADING:
        return f"is loading data{at}"
    if s.kind == StateKind.EXITED:
        return f"exited cleanly {after_call(s)}"
    if s.kind == StateKind.STOPPED:
        return f"is stopped (SIGSTOP){at}"
    if s.kind == StateKind.UNREACHABLE:
        return "is unreachable: its node was lost (" + \
            (f"last seen {after_call(s)}" if s.call else "no collective seen") + ")"
    if s.kind == StateKind.NOT_ARRIVED:
        blocked = f": it is {blocked_text(s)}" if s.blocked_on else ""
        return f"has not joined the process group{blocked}{at}" if at or s.steps or \
            s.frame or blocked else \
            "has not joined the process group (no trace of it, or still starting)"
    if s.kind == StateKind.PEER_FAILED and s.call is not None:
        return (f"was elsewhere{at or ' (no stack)'}: it entered {s.call.describe()} "
                f"(seq {s.call.seq}) at {s.call.short_site} only later")
    if s.kind == StateKind.DIED and s.death is not None and s.death.left_early:
        return f"left {after_call(s)} and died on its way out: {s.death.cause}"
    if s.kind in (StateKind.DIED, StateKind.PEER_FAILED) and s.death is not None:
        return f"died: {s.death.cause}"
    if s.kind == StateKind.BLOCKED and s.call is not None:
        return f"waits in {s.call.describe()} on group {s.call.group} at {s.call.short_site}"
    return f"is running{at}"


def wait_text(w: Wait, call: Call | None) -> str:
    """``rank 0 waits for rank 1 in all_reduce #12 at train.py:32``."""
    return f"rank {w.rank} waits{_waited(w, call)}"


def _waited(w: Wait, call: Call | None) -> str:
    what = f"{w.op} #{w.seq}" if w.seq is not None else \
        ("init_process_group" if w.op == "init" else w.op)
    site = f" at {call.where().partition(' at ')[2]}" if call is not None else ""
    group = f" on group {w.group}" if w.group not in ("0", "rendezvous") else ""
    whom = f" for {ranks_text(w.waits_for)}" if w.waits_for else ""
    return f"{whom} in {what}{group}{site}"


def waits_text(waits: list[Wait], states: dict[int, RankState] | None = None,
               most: int = 16) -> list[str]:
    """A line a group of ranks that wait alike (``ranks 0-6144, 6146-8191 (8191 ranks)
    wait for rank 6145 in all_reduce #12 at train.py:32``), at most ``most`` lines; with
    no ``states``, the lines leave the call site out."""
    groups = rank_groups({w.rank: _waited(w, states[w.rank].call if states else None)
                          for w in waits})
    return [f"{ranks_text(ranks, count=True)} wait{'s' if len(ranks) == 1 else ''}{what}"
            for ranks, what in groups[:most]]
