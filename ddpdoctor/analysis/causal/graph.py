"""The wait-for graph: who is blocked on whom, its sinks and its cycles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.align.clocks import same_host
from ddpdoctor.analysis.model import Call, JobView
from ddpdoctor.trace import layout as L


@dataclass(frozen=True)
class Wait:
    """``rank`` is blocked in ``op`` (seq ``seq`` of ``group``) until ``waits_for`` arrive."""

    rank: int
    waits_for: tuple[int, ...]
    group: str
    seq: int | None
    op: str

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "waits_for": list(self.waits_for), "group": self.group,
                "seq": self.seq, "op": self.op}


def _p2p_wait(call: Call, states: dict[int, RankState]) -> tuple[int, ...]:
    """A blocked send/recv waits for its peer unless the peer is in the matching call."""
    peer = states.get(call.peer)
    if peer is None:
        return ()
    other = peer.call
    want = L.RecordFlag.SEND if call.flags & L.RecordFlag.RECV else L.RecordFlag.RECV
    matched = (peer.kind == StateKind.BLOCKED and other is not None and other.open and
               other.kind == L.RecordKind.P2P and other.peer == call.rank and
               bool(other.flags & want))
    return () if matched else (call.peer,)


def _call_at(calls: list[Call], seq: int) -> Call | None:
    for c in reversed(calls):
        if c.seq == seq:
            return c
        if c.seq < seq:
            return None
    return None


def _collective_wait(call: Call, job: JobView, states: dict[int, RankState]) -> tuple[int, ...]:
    """Members of the call's group whose last seq on it is below the call's (or no trace);
    for a call that already ended (it raised), also those that entered it only later."""
    out = []
    for m in job.group_members(call.group):
        if m == call.rank:
            continue
        run = job.ranks.get(m)
        last = run.last_call(call.group) if run is not None else None
        if last is None or last.seq < call.seq:
            out.append(m)
        elif not call.open and run is not None:
            theirs = _call_at(run.calls.get(call.group, []), call.seq)
            if theirs is not None and same_host(job, m, call.rank) and \
                    theirs.t_start > call.t_end:  # (other hosts' clocks: not comparable)
                out.append(m)  # it arrived after this rank had given up
    return tuple(out)


def _rendezvous_wait(state: RankState, states: dict[int, RankState]) -> tuple[int, ...]:
    """init waits for the ranks not arrived; new_group for those behind in new_group calls."""
    late = [r for r, s in states.items() if r != state.rank and s.kind == StateKind.NOT_ARRIVED]
    if state.mark == "new_group":
        late += [r for r, s in states.items() if r != state.rank and r not in late and
                 s.mark_count < state.mark_count]
    return tuple(sorted(late))


def wait_for_graph(job: JobView, states: dict[int, RankState]) -> list[Wait]:
    """One Wait per rank that waits on others (blocked, in the rendezvous, or failed of a
    peer's absence while in a call)."""
    waits = []
    for r, s in states.items():
        if s.kind == StateKind.RENDEZVOUS:
            waits.append(Wait(r, _rendezvous_wait(s, states), "rendezvous", None, s.mark))
            continue
        if s.kind not in (StateKind.BLOCKED, StateKind.PEER_FAILED) or s.call is None:
            continue
        c = s.call
        targets = _p2p_wait(c, states) if c.kind == L.RecordKind.P2P else \
            _collective_wait(c, job, states)
        waits.append(Wait(r, targets, c.group, c.seq, c.op))
    return waits


def edges(waits: list[Wait]) -> dict[int, tuple[int, ...]]:
    return {w.rank: w.waits_for for w in waits if w.waits_for}


def cycles(waits: list[Wait]) -> list[tuple[int, ...]]:
    """Strongly connected components of two or more ranks (Tarjan's algorithm, with an
    explicit stack: a wait chain of any length), in the order Tarjan's finds them."""
    graph = edges(waits)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    found: list[tuple[int, ...]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        walk = [(root, iter(graph.get(root, ())))]  # the recursion's frames
        while walk:
            v, targets = walk[-1]
            for w in targets:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    walk.append((w, iter(graph.get(w, ()))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:  # every target of v seen: v's component is done; back to its caller
                walk.pop()
                if walk:
                    caller = walk[-1][0]
                    low[caller] = min(low[caller], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(tuple(sorted(comp)))
    return found


def sinks(waits: list[Wait], states: dict[int, RankState]) -> dict[int, list[Wait]]:
    """Ranks where edges end (not waiting themselves) -> the waits that end on them."""
    graph = edges(waits)
    out: dict[int, list[Wait]] = {}
    for w in waits:
        for t in w.waits_for:
            if t not in graph:
                out.setdefault(t, []).append(w)
    return dict(sorted(out.items()))


def reachable(rank: int, waits: list[Wait]) -> set[int]:
    """Every rank ``rank`` waits on, directly or through others."""
    graph = edges(waits)
    seen: set[int] = set()
    todo = list(graph.get(rank, ()))
    while todo:
        r = todo.pop()
        if r not in seen:
            seen.add(r)
            todo.extend(graph.get(r, ()))
    return seen
