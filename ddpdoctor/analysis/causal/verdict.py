"""hang_verdict: the one rule that decides a running job hangs."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.causal.facts import rank_states
from ddpdoctor.analysis.causal.rank_words import frame_text, ranks_text, wait_text
from ddpdoctor.analysis.causal.mismatch import divergences
from ddpdoctor.analysis.causal.graph import Wait, reachable, wait_for_graph
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.align.clocks import host_now
from ddpdoctor.analysis.model import NS, JobView
from ddpdoctor.trace import layout as L

WORKING = (StateKind.COMPUTING, StateKind.DATA_LOADING, StateKind.NOT_ARRIVED,
           StateKind.OS_BLOCKED, StateKind.UNSEEN)  # (a blocked rank's I/O may still be progress)


MISMATCH_SETTLE_S = 0.25  # a rank inside a mismatched collective this long: it never returns
MIN_REPORT_GRACE_S = 5.0


def report_grace_s(hang_timeout: float) -> float:
    """How long past the hang timeout a rank that was never seen (no trace: its process, or
    its node, has not reported it yet) is taken to be starting: as long as node 0 lets a
    node that reported before stay silent before it calls it lost."""
    return max(MIN_REPORT_GRACE_S, hang_timeout / 2)


@dataclass(frozen=True)
class HangVerdict:
    """The job must be stopped: ``waits`` are the hopeless waits, ``absent`` the ranks they
    end on.  ``reason``: hang (past the timeout, nobody they wait on makes progress),
    mismatch (a rank inside a collective the others called differently), abandoned (a
    rank waits in a collective that a rank which exited never entered), failed (a rank
    died and the job did not end within the timeout)."""

    message: str
    waits: tuple[Wait, ...]
    absent: tuple[int, ...]
    reason: str = "hang"


@dataclass(frozen=True)
class Straggling:
    """Ranks wait past the timeout on ranks that still make progress, or that were never
    seen yet and are within the report grace (not a hang)."""

    message: str
    ranks: tuple[int, ...]


def progressing(s: RankState, now_ns: int, window_ns: int) -> bool:
    """Does the rank make progress: CPU time advancing, or progress seen in the window?
    Progress is the rank's process tree's (``proc.progress.made_progress``: the rank or a
    process it waits on, a DataLoader worker or a subprocess, computing, doing I/O, or in
    a chosen, bounded wait: retrying in timed sleeps, a worker or a command it waits on
    sleeping) or its trace advancing.  A rank in one long sleep, or waiting on a lock,
    with nothing of its own working, does not."""
    if s.kind not in WORKING:
        return False
    return bool(s.cpu_busy) or (s.progress_ns is not None and now_ns - s.progress_ns < window_ns)


def _arrived_ages(job: JobView, w: Wait, states: dict[int, RankState]) -> list[int]:
    """How long ago each rank taking part in ``w``'s call entered it, each on its own clock:
    the rendezvous (the same init, or the same new_group call), the collective at the same
    seq of the group (whether it still waits in it or already returned), the p2p peer."""
    if w.group == "rendezvous":
        nth = states[w.rank].mark_count if w.op == "new_group" else 0  # 0: the last init
        ages = []
        for r, run in job.ranks.items():
            marks = [m for m in run.marks if m.op == w.op]
            if marks and len(marks) >= nth:
                ages.append(host_now(job, r) - marks[nth - 1].t_start)
        return ages
    call = states[w.rank].call
    if call is None:
        return []
    if call.kind == L.RecordKind.P2P:
        peer = states.get(call.peer)
        return [host_now(job, call.peer) - peer.since_ns] \
            if peer is not None and peer.since_ns is not None else []
    ages = []
    for m in job.group_members(call.group):
        run = job.ranks.get(m)
        entered = next((c.t_start for c in reversed(run.calls.get(call.group, []))
                        if c.seq <= call.seq), None) if run is not None else None
        if entered is not None:
            ages.append(host_now(job, m) - entered)
    return ages


def wait_age_ns(job: JobView, w: Wait, states: dict[int, RankState],
                cache: dict[tuple, int] | None = None) -> int:
    """How long ``w`` has been a wait worth judging.  While it waits on ranks, since the rank
    entered the call; once nobody is missing, since the last of its call's ranks arrived:
    until then it waited on ranks that were still on their way (judged by their own
    progress), and a call every rank has just entered is not a hung call."""
    since = states[w.rank].since_ns
    own = host_now(job, w.rank) - since if since is not None else 0
    if w.waits_for:
        return own
    cache = {} if cache is None else cache
    s = states[w.rank]
    key = (w.group, w.seq, w.op, s.mark_count if w.group == "rendezvous" else
           (s.call.peer, w.rank) if s.call is not None and s.call.kind == L.RecordKind.P2P
           else 0)
    if key not in cache:
        cache[key] = min(_arrived_ages(job, w, states), default=own)
    return min(own, cache[key])


def _mismatched(job: JobView, states: dict[int, RankState],
                settle_s: float) -> HangVerdict | None:
    """A rank has been inside a collective that its group called differently for
    ``settle_s``: that call never completes."""
    if not any(s.kind == StateKind.BLOCKED for s in states.values()):
        return None
    for div in divergences(job):
        for r, call in sorted(div.calls.items()):
            s = states.get(r)
            if s is not None and s.kind == StateKind.BLOCKED and s.call is not None and \
                    (s.call.group, s.call.seq) == (div.group, div.seq) and \
                    host_now(job, r) - (s.since_ns or 0) >= settle_s * NS:
                return HangVerdict(f"mismatched collectives at seq {div.seq}", (),
                                   tuple(div.culprits), "mismatch")
    return None


def _abandoned(states: dict[int, RankState], waits: list[Wait]) -> HangVerdict | None:
    """A rank waits in a collective that a rank which exited cleanly never entered."""
    for w in waits:
        s = states[w.rank]
        gone = [t for t in w.waits_for if states[t].kind == StateKind.EXITED]
        if gone and s.kind == StateKind.BLOCKED and s.call is not None:
            return HangVerdict(f"rank {w.rank} waits in {s.call.op} (seq {s.call.seq}) that "
                               f"exited {ranks_text(gone)} never entered", (w,),
                               tuple(gone), "abandoned")
    return None


def _failed_and_left(job: JobView, states: dict[int, RankState],
                     limit: int) -> HangVerdict | None:
    """A rank's process died (not a clean exit) ``limit`` ago and the job did not end."""
    for r, s in states.items():
        run = job.ranks.get(r)
        if run is None or s.death is None or run.gone_at_ns is None:
            continue
        if job.now_ns - run.gone_at_ns >= limit:
            return HangVerdict(f"rank {r} died ({s.death.cause}) and the job did not end",
                               (), (r,), "failed")
    return None


@dataclass(frozen=True)
class Assessment:
    """The waits of a live job sorted by the one hang rule: ``hopeless`` have lasted the
    hang timeout on ranks that make no progress (or on nobody: every rank is inside the
    call); ``behind`` are the progressing ranks some wait past the timeout leads to;
    ``unseen`` the ranks never seen yet, within the report grace."""

    states: dict[int, RankState]
    waits: list[Wait]
    hopeless: list[Wait]
    behind: frozenset[int]
    unseen: frozenset[int]
    bounded: tuple[Wait, ...] = ()  # hopeless because they outlasted the wait bound


def assess(job: JobView, hang_timeout: float, states: dict[int, RankState] | None = None,
           waits: list[Wait] | None = None) -> Assessment:
    """Which waits are hopeless, which wait on ranks still working: the rule both the stop
    (``judge``) and a live diagnosis (``diagnose``) read, over the same states."""
    states = rank_states(job) if states is None else states
    waits = wait_for_graph(job, states) if waits is None else waits
    limit = int(hang_timeout * NS)
    live = {r for r, s in states.items() if progressing(s, host_now(job, r), limit)}
    grace = int(report_grace_s(job.hang_timeout or hang_timeout) * NS)
    hopeless, behind, unseen, bounded = [], set(), set(), []
    bound = int(max(job.bound, hang_timeout) * NS)
    ages: dict[tuple, int] = {}
    for w in waits:
        if states[w.rank].kind == StateKind.PEER_FAILED or states[w.rank].since_ns is None:
            continue
        age = wait_age_ns(job, w, states, ages)
        if age < limit:
            continue
        ahead = reachable(w.rank, waits) & live
        idle = set(w.waits_for) - live
        if ahead and age >= bound:  # working, but past the bound: every wait has one
            hopeless.append(w)
            bounded.append(w)
        elif ahead:
            behind |= ahead
        elif idle and not any(r in job.ranks for r in idle) and age < limit + grace:
            unseen |= idle  # never seen yet: starting, their node has not reported them
        else:
            hopeless.append(w)
    return Assessment(states, waits, hopeless, frozenset(behind), frozenset(unseen),
                      tuple(bounded))


def judge(job: JobView, hang_timeout: float,
          settle_s: float = MISMATCH_SETTLE_S) -> HangVerdict | Straggling | None:
    """Stop (mismatch, abandoned, hang, a death the job did not end of), straggler, or
    nothing to say, from the job's states and progress facts: the supervisor's one rule."""
    states = rank_states(job)
    waits = wait_for_graph(job, states)
    limit = int(hang_timeout * NS)
    for found in (_mismatched(job, states, settle_s), _abandoned(states, waits)):
        if found is not None:
            return found
    seen = assess(job, hang_timeout, states, waits)
    hopeless, behind, unseen = seen.hopeless, seen.behind, seen.unseen
    if hopeless:
        w = hopeless[0]
        absent = sorted({t for h in hopeless for t in h.waits_for} - {h.rank for h in hopeless})
        now = host_now(job, w.rank)
        waited = (now - (states[w.rank].since_ns or now)) / NS
        msg = f"{wait_text(w, states[w.rank].call)} for {waited:.1f} s"
        if absent and w in seen.bounded:
            msg += (f"; {ranks_text(absent)} kept working outside any collective past the "
                    f"wait bound ({job.bound:g} s)")
        elif absent:
            msg += f"; {ranks_text(absent)} made no progress"
        elif len(hopeless) == len(states) > 1:
            msg += "; every rank is inside it"
        return HangVerdict(msg, tuple(hopeless), tuple(absent))
    failed = _failed_and_left(job, states, limit)
    if failed is not None or not (behind or unseen):
        return failed
    parts = []
    for r in sorted(behind):
        at = frame_text(states[r])
        doing = ("is starting" if states[r].kind == StateKind.NOT_ARRIVED else
                 "is computing" if states[r].cpu_busy else
                 "is working (I/O, its workers, or a wait it chose)")
        parts.append(f"rank {r} {doing}" + (f" at {at}" if at else ""))
    if unseen:
        parts.append(f"{ranks_text(sorted(unseen))} not seen yet (starting)")
    waiting = sorted({w.rank for w in waits})
    return Straggling("; ".join(parts) + f"; {ranks_text(waiting)} wait"
                      + ("s" if len(waiting) == 1 else ""),
                      tuple(sorted(behind | unseen)))


def hang_verdict(job: JobView, hang_timeout: float) -> HangVerdict | None:
    """The job hangs when blocked ranks have waited ``hang_timeout`` on ranks that made no
    progress for as long (or on each other, in a cycle or a mismatch)."""
    found = judge(job, hang_timeout)
    return found if isinstance(found, HangVerdict) else None
