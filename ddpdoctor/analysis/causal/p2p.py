"""Point-to-point calls that can never meet: a send and its recv whose sizes or dtypes
differ (gloo aborts the receiver), or a pair where one side sends fewer tensors than the
other receives, or more (a pipeline stage that skips a micro-batch), and went on.

The n-th send from rank a to rank b meets the n-th recv of rank b from rank a on the same
group (their p2p seqs).  A pair whose counts differ is a mismatch only when the side that
made fewer calls went on (it exited, or waits in another call); both sides waiting in a
recv (or a send) on each other is the cycle the wait-for graph tells.  Who is at fault is
the side whose record shows a branch that jumped over its p2p call (a `continue` on an
empty micro-batch), else every side, for a count; for a size or dtype, the receiver: a
recv's buffer is the receiver's word on what arrives, the send's tensor the sender's data."""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass

from ddpdoctor.analysis.model import ranks_text
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.explain.recorded import entered_way
from ddpdoctor.analysis.load.user_source import _parse, split_callsite
from ddpdoctor.analysis.model import Call, Finding, FindingKind, JobView, Severity
from ddpdoctor.trace import layout as L

_SEND, _RECV = int(L.RecordFlag.SEND), int(L.RecordFlag.RECV)


@dataclass(frozen=True)
class PairMismatch:
    """The first p2p call of a pair (``sender`` -> ``receiver`` on ``group``) that cannot
    meet its other side: ``what`` is size, dtype or count; ``send``/``recv`` the calls at
    that seq (one is None for a count)."""

    sender: int
    receiver: int
    group: str
    seq: int
    what: str
    send: Call | None
    recv: Call | None
    sent: int
    received: int


def _calls(job: JobView, rank: int, flag: int, peer: int, group: str) -> dict[int, Call]:
    run = job.ranks.get(rank)
    if run is None:
        return {}
    return {c.seq: c for c in run.p2p if c.flags & flag and c.peer == peer and c.group == group}


def _numel(c: Call) -> int:
    """The elements the call moves (its tensors', in or out)."""
    return sum(math.prod(shape) for shape in (c.in_shapes or c.out_shapes))


def _moved_on(s: RankState | None, peer: int, last: Call) -> bool:
    """Did the rank go past the pair: it made ``last``, its latest call with ``peer``, and
    then exited, died, or entered a call that is not a p2p call with ``peer`` (a rank still
    on its way to its first call, or waiting on its peer either way, says nothing)?"""
    if s is None or last.open:
        return False
    if s.kind in (StateKind.EXITED, StateKind.DIED):
        return True
    call = s.call
    if call is None or not call.open or call.t_start < last.t_start:
        return False
    return not (call.kind == L.RecordKind.P2P and call.peer == peer)


def _pair(job: JobView, states: dict[int, RankState], a: int, b: int,
          group: str) -> PairMismatch | None:
    sends, recvs = _calls(job, a, _SEND, b, group), _calls(job, b, _RECV, a, group)
    for seq in sorted(set(sends) & set(recvs)):
        s, r = sends[seq], recvs[seq]
        if s.dtypes and r.dtypes and s.dtypes != r.dtypes:
            return PairMismatch(a, b, group, seq, "dtype", s, r, len(sends), len(recvs))
        if (s.in_shapes or s.out_shapes) and (r.in_shapes or r.out_shapes) and \
                _numel(s) != _numel(r):
            return PairMismatch(a, b, group, seq, "size", s, r, len(sends), len(recvs))
    if not sends and not recvs:
        return None
    top_s, top_r = max(sends, default=-1), max(recvs, default=-1)
    if top_r > top_s >= 0 and recvs[top_r].open and _moved_on(states.get(a), b, sends[top_s]):
        return PairMismatch(a, b, group, top_r, "count", None, recvs[top_r], top_s + 1,
                            top_r + 1)
    if top_s > top_r >= 0 and sends[top_s].open and _moved_on(states.get(b), a, recvs[top_r]):
        return PairMismatch(a, b, group, top_s, "count", sends[top_s], None, top_s + 1,
                            top_r + 1)
    return None


def find_pair_mismatch(job: JobView, states: dict[int, RankState]) -> PairMismatch | None:
    """The first pair of the job whose p2p calls cannot meet (earliest in time)."""
    pairs = {(r, c.peer, c.group) for r, run in job.ranks.items() for c in run.p2p
             if c.flags & _SEND and c.peer >= 0}
    pairs |= {(c.peer, r, c.group) for r, run in job.ranks.items() for c in run.p2p
              if c.flags & _RECV and c.peer >= 0}
    found = [m for a, b, g in sorted(pairs) if (m := _pair(job, states, a, b, g))]
    return min(found, key=lambda m: min(c.t_start for c in (m.send, m.recv) if c)) \
        if found else None


def _skipper(job: JobView, m: PairMismatch) -> tuple[int, str, str, int, str] | None:
    """The side whose record shows a branch that jumped over its own p2p call (a `continue`
    or `break` before the call, in the loop around it), with that line: it made fewer."""
    short = m.sender if m.sent < m.received else m.receiver
    calls = [c for c in (m.send, m.recv) if c is not None]
    run = job.ranks.get(short)
    own = [c for c in (run.p2p if run else []) if c.peer in (m.sender, m.receiver)]
    site = own[-1].callsite if own else (calls[0].callsite if calls else "")
    path, line = split_callsite(site)
    parsed = _parse(path)
    flow = run.flow if run is not None else None
    if parsed is None or flow is None or line <= 0:
        return None
    tree, text = parsed
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and
             n.lineno < line <= (n.end_lineno or n.lineno)]
    if not loops:
        return None
    loop = max(loops, key=lambda n: n.lineno)
    jumps = {n.lineno for n in ast.walk(loop) if isinstance(n, ast.If) and n.lineno < line
             and n.body and isinstance(n.body[0], (ast.Continue, ast.Break))}
    base = os.path.basename(path)
    for site_ in flow.sites.values():
        if site_.key[0] == base and site_.line in jumps:
            way = entered_way(site_)
            taken = sum((e.fell, e.jumped)[way] for seg in flow.segments
                        for e in seg.entries if e.site == site_.number)
            if taken:
                lines = text.splitlines()
                code = lines[site_.line - 1].split("#", 1)[0].strip()
                return short, f"{base}:{site_.line} `{code}`", path, site_.line, code
    return None


def pair_finding(job: JobView, m: PairMismatch) -> Finding:
    """The mismatch as a finding: the lines and the counts or sizes that differ."""
    where = lambda c: f"{c.describe()} at {c.short_site}"  # noqa: E731
    if m.what == "count":
        pending = m.recv or m.send
        assert pending is not None
        waits_in = "recv" if m.recv is not None else "send"
        mover = m.sender if m.recv is not None else m.receiver
        summary = (f"rank {m.sender} sent {m.sent} tensor{'s' if m.sent != 1 else ''} to rank "
                   f"{m.receiver}, which receives {m.received}: rank "
                   f"{pending.rank} waits in {waits_in} #{m.seq + 1} at {pending.short_site} "
                   f"and rank {mover} went on")
    else:
        assert m.send is not None and m.recv is not None
        summary = (f"rank {m.sender}'s {where(m.send)} meets rank {m.receiver}'s "
                   f"{where(m.recv)}: the {m.what} differs (p2p #{m.seq + 1} of the pair)")
    skip = _skipper(job, m) if m.what == "count" else None
    if m.what != "count":  # a recv's buffer is the receiver's word on what arrives; the
        ranks = (m.receiver,)  # sender's tensor is what it has
    else:
        ranks = (skip[0],) if skip else tuple(sorted({m.sender, m.receiver}))
    detail = summary + "."
    if m.what != "count":
        detail += (f"\nA recv must be given a buffer of the size and dtype its peer sends: "
                   f"rank {m.receiver}'s buffer is its guess of what arrives, rank "
                   f"{m.sender}'s tensor is what it has.")
    if skip:
        detail += (f"\nRank {skip[0]} jumped over its p2p call at {skip[1]}: it made one "
                   "fewer than its peer.")
    fix = ("Give the send and the recv the same size and dtype (the receiver must expect "
           "what the sender sends: send the size first, or pad the last micro-batch)."
           if m.what != "count" else
           "Make both sides of the pair agree on how many tensors pass: a stage that skips a "
           "micro-batch must tell its peer (send an empty or flagged tensor instead), or both "
           "must decide the count together.")
    evidence = {"group": m.group, "p2p": {
        "from": m.sender, "to": m.receiver, "what": m.what, "sent": m.sent,
        "received": m.received,
        "send_site": m.send.callsite if m.send else None,
        "recv_site": m.recv.callsite if m.recv else None}}
    if skip:
        evidence["decision"] = {"file": skip[2], "line": skip[3], "source": skip[4], "ranks": {
            str(skip[0]): {"outcome": "continue", "values": {}},
            **{str(r): {"outcome": "not reached", "values": {}}
               for r in (m.sender, m.receiver) if r != skip[0]}}}
    elif m.what == "count":
        evidence["no_majority"] = True
    return Finding(FindingKind.COLLECTIVE_MISMATCH, Severity.ERROR, ranks, m.seq,
                   summary + ("" if not skip else f"; {ranks_text(ranks)} skipped at "
                              f"{skip[1]}"), detail, fix, evidence)
