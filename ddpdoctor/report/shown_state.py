"""A rank's state as report.json and live.json show it: one rule over the causal model's state.

The report decides it from the causal model's RankState of the rank (facts.state_of); the
supervisor's live view from what it follows live (supervisor/live_state.py).  Both hand the
same facts to ``shown_state``, so the live UI and the final report cannot disagree on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.model import NS

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
    in the rendezvous yet); computing (its own code, or its DataLoader)."""
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
            StateKind.NOT_ARRIVED: "starting"}.get(k, "computing")
