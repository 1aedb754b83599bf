"""A rank's state as report.json and live.json show it: one function over the causal state.

``rank_shown_state`` is the one function: the report calls it with the causal model's
RankState of the rank (facts.state_of) and the job view's peers (``JobPeers``); the
supervisor's live view with the stand-in it reads from the traces it follows and its own
peers (supervisor/live_state.py).  So the live UI and the final report cannot disagree on
the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.model import NS, Call, JobView
from ddpdoctor.trace import layout as L

IN_CALL = (StateKind.BLOCKED, StateKind.RENDEZVOUS)


@dataclass(frozen=True)
class ShownFacts:
    """What a rank's shown state is decided from.

    kind: the causal model's state of the rank.  killed: (DIED) it ended by a signal and left
    no last words (no exception, no fatal-signal dump, no failed state).  waited_ns: how
    long it has been inside its current call or the rendezvous, on its own clock.
    peers_behind: a collective peer has not reached that call yet (the rendezvous: a rank
    of the world has not entered it).  p2p: the call is a send or recv.  job_hung: the job
    was judged hung."""

    kind: StateKind
    killed: bool = False
    waited_ns: int = 0
    peers_behind: bool = False
    p2p: bool = False
    job_hung: bool = False


def shown_state(f: ShownFacts, hang_timeout: float) -> str:
    """The rule.  died: killed (a signal, no last words) or failed; raised of a peer's
    absence: failed; exited; unreachable (its node was lost); stopped (SIGSTOP); inside a
    call or the rendezvous: hung once the job is judged hung, or once it has been inside for
    the hang timeout with every peer there; else waiting while a peer has not reached it
    (never for p2p: slow is not hung, and only the causal model says a late peer is stuck
    rather than straggling), else in_collective; blocked (outside any call, no CPU, the OS says in what); starting (not
    in the rendezvous yet); unknown (outside any call, known from flight recorder dumps
    alone); computing (its own code, or its DataLoader)."""
    k = f.kind
    if k == StateKind.DIED:
        return "killed" if f.killed else "failed"
    if k == StateKind.PEER_FAILED:
        return "failed"
    if k in IN_CALL:
        behind = f.peers_behind and not f.p2p
        if f.job_hung or (f.waited_ns >= hang_timeout * NS and not behind):
            return "hung"
        return "waiting" if behind else "in_collective"
    return {StateKind.EXITED: "exited", StateKind.UNREACHABLE: "unreachable",
            StateKind.STOPPED: "stopped", StateKind.OS_BLOCKED: "blocked",
            StateKind.NOT_ARRIVED: "starting", StateKind.UNSEEN: "unknown"}.get(k, "computing")


class Peers(Protocol):
    """How far a rank's peers have come, as one view of the job tells."""

    def lowest_seq(self, group: str) -> int:
        """The lowest last seq the members of ``group`` reached (-1: one has none)."""
        ...

    def all_arrived(self) -> bool:
        """Has every rank of the world entered init_process_group (inside it, or past it)?"""
        ...


def rank_shown_state(kind: StateKind, call: Call | None, since_ns: int | None, now_ns: int,
                     peers: Peers, hang_timeout: float, *, killed: bool = False,
                     in_init: bool = False, job_hung: bool = False) -> str:
    """A rank's shown state: its causal state ``kind``, the call it is inside (or its
    rendezvous mark) since ``since_ns``, ``now_ns`` on the rank's own clock, and how far its
    peers came.  A rank inside a call that a peer of its group has not reached yet is
    waiting: the rank itself reached the call, so the group's lowest seq below it means a
    peer is behind; inside init_process_group (``in_init``), a rank of the world that has
    not entered it is."""
    waited = now_ns - since_ns if kind in IN_CALL and since_ns is not None else 0
    behind = False
    if kind == StateKind.RENDEZVOUS:
        behind = in_init and not peers.all_arrived()
    elif kind == StateKind.BLOCKED and call is not None:
        behind = peers.lowest_seq(call.group) < call.seq
    return shown_state(ShownFacts(kind, killed=killed, waited_ns=waited, peers_behind=behind,
                                  p2p=call is not None and call.kind == L.RecordKind.P2P,
                                  job_hung=job_hung), hang_timeout)


class JobPeers:
    """A job view's peers (each group's lowest seq found once per view)."""

    def __init__(self, job: JobView) -> None:
        self.job = job
        self._lowest: dict[str, int] = {}
        self._all_arrived: bool | None = None

    def lowest_seq(self, group: str) -> int:
        if group not in self._lowest:
            lows = []
            for r in self.job.group_members(group):
                last = self.job.ranks[r].last_call(group) if r in self.job.ranks else None
                lows.append(last.seq if last is not None else -1)
            self._lowest[group] = min(lows, default=-1)
        return self._lowest[group]

    def all_arrived(self) -> bool:
        if self._all_arrived is None:
            job = self.job
            self._all_arrived = all(
                r in job.ranks and (job.ranks[r].header.state != L.RankState.STARTING or
                                    any(m.op == "init" for m in job.ranks[r].marks))
                for r in range(job.world_size))
        return self._all_arrived
