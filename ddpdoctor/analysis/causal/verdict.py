"""hang_verdict: the one rule that decides a running job hangs."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.causal.facts import rank_states
from ddpdoctor.analysis.causal.findings import frame_text, ranks_text, wait_text
from ddpdoctor.analysis.causal.graph import Wait, reachable, wait_for_graph
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.clocks import host_now
from ddpdoctor.analysis.model import NS, JobView

WORKING = (StateKind.COMPUTING, StateKind.DATA_LOADING, StateKind.NOT_ARRIVED)


@dataclass(frozen=True)
class HangVerdict:
    """The job hangs: ``waits`` are the hopeless waits (past the timeout, nobody they wait
    on makes progress), ``absent`` the ranks they end on."""

    message: str
    waits: tuple[Wait, ...]
    absent: tuple[int, ...]


@dataclass(frozen=True)
class Straggling:
    """Ranks wait past the timeout on ranks that still make progress (not a hang)."""

    message: str
    ranks: tuple[int, ...]


def progressing(s: RankState, now_ns: int, window_ns: int) -> bool:
    """Does the rank make progress: CPU time advancing, or progress seen in the window?
    A rank that sleeps, polls, or waits on I/O or a lock does not."""
    if s.kind not in WORKING:
        return False
    return bool(s.cpu_busy) or (s.progress_ns is not None and now_ns - s.progress_ns < window_ns)


def judge(job: JobView, hang_timeout: float) -> HangVerdict | Straggling | None:
    """Hang, straggler, or nothing to say, from the job's states and progress facts."""
    states = rank_states(job)
    waits = wait_for_graph(job, states)
    limit = int(hang_timeout * NS)
    live = {r for r, s in states.items() if progressing(s, host_now(job, r), limit)}
    hopeless, behind = [], set()
    for w in waits:
        since = states[w.rank].since_ns
        if states[w.rank].kind == StateKind.PEER_FAILED or since is None or \
                host_now(job, w.rank) - since < limit:
            continue
        ahead = reachable(w.rank, waits) & live
        if ahead:
            behind |= ahead
        else:
            hopeless.append(w)
    if hopeless:
        w = hopeless[0]
        absent = sorted({t for h in hopeless for t in h.waits_for} - {h.rank for h in hopeless})
        now = host_now(job, w.rank)
        waited = (now - (states[w.rank].since_ns or now)) / NS
        msg = f"{wait_text(w, states[w.rank].call)} for {waited:.1f} s"
        if absent:
            msg += f"; {ranks_text(absent)} made no progress"
        elif len(hopeless) == len(states) > 1:
            msg += "; every rank is inside it"
        return HangVerdict(msg, tuple(hopeless), tuple(absent))
    if behind:
        parts = []
        for r in sorted(behind):
            at = frame_text(states[r])
            parts.append(f"rank {r} is computing" + (f" at {at}" if at else ""))
        waiting = sorted({w.rank for w in waits})
        return Straggling("; ".join(parts) + f"; {ranks_text(waiting)} wait"
                          + ("s" if len(waiting) == 1 else ""), tuple(sorted(behind)))
    return None


def hang_verdict(job: JobView, hang_timeout: float) -> HangVerdict | None:
    """The job hangs when blocked ranks have waited ``hang_timeout`` on ranks that made no
    progress for as long (or on each other, in a cycle or a mismatch)."""
    found = judge(job, hang_timeout)
    return found if isinstance(found, HangVerdict) else None
