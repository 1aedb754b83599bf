"""Every rank inside one call and none returns: the stalled ring step, collective or rendezvous.

A call that every member of its group entered and that none leaves has no rank at fault:
what carries it stopped.  When the ranks' connections show it (analysis/load/links.py),
the finding names the link: the hosts, the connections, their unacknowledged bytes and
how long nothing moved."""

from __future__ import annotations

from ddpdoctor.analysis.causal.rank_words import frame_text, ranks_text, whereabouts
from ddpdoctor.analysis.causal.graph import Wait
from ddpdoctor.analysis.load.links import (Link, LinkFacts, host_pairs, link_line,
                                             links_summary)
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.align.clocks import ordered
from ddpdoctor.analysis.model import FindingKind, Call, Finding, JobView, Severity
from ddpdoctor.trace import layout as L

STALL_FIX = ("Nothing in the ranks' own code differs: look at what carries the call. For gloo, "
             "check that every rank can reach MASTER_ADDR and every other rank's address "
             "(GLOO_SOCKET_IFNAME picks the interface; a firewall or a hostname that resolves "
             "to another host's interface stalls the connections); for NCCL, NCCL_DEBUG=INFO. "
             "An environment variable torch cannot parse can stall it too: see the notices.")
MAX_LINK_LINES = 16
MAX_CONNECTIONS = 256  # the ranks' connections to each other kept in the evidence


def link_fix(links: list[Link]) -> str:
    """What to check when the network between hosts stopped delivering the ranks' bytes."""
    a, b = host_pairs(links)[0]
    ip_a, ip_b = next(k.path_ips for k in links if k.path == (a, b))
    return (f"No rank is at fault: the network path from {a} ({ip_a}) to {b} ({ip_b}) "
            f"stopped delivering the ranks' bytes. Check it from {a}: "
            f"`ip route get {ip_b.strip('[]')}` (a blackhole or a missing route), the "
            f"firewall rules of both hosts, `ss -tin dst {ip_b}` (unacknowledged bytes, "
            "retransmissions), the interface's link and MTU; GLOO_SOCKET_IFNAME picks the "
            "interface gloo uses. The job cannot go on over this path: restart it once the "
            "path carries traffic again (from a checkpoint), or set the process group's "
            "timeout so that the ranks fail instead of waiting.")


def _sender_inside(rec: Call, call: Call, states: dict[int, RankState]) -> bool:
    """Is the ring step's sender blocked in the same collective (a victim too)?"""
    peer = states.get(rec.peer)
    return peer is not None and peer.kind == StateKind.BLOCKED and peer.call is not None and \
        (peer.call.group, peer.call.seq) == (call.group, call.seq)


def stalled_ring(job: JobView, waiting: dict[int, Call],
                 states: dict[int, RankState]) -> Finding | None:
    """The oldest ring receive that never completed, blaming its sender: when that sender
    is somewhere else than inside the same collective (stopped, computing).  A sender
    blocked in the collective itself waits too: no blame (stalled_call says it)."""
    stuck = []
    for rank, call in waiting.items():
        for rec in job.ranks[rank].ring_steps[-64:]:
            if rec.open and rec.parent == call.seq and rec.flags & L.RecordFlag.RECV and \
                    not _sender_inside(rec, call, states):
                stuck.append((rank, rec))
    if not stuck:
        return None
    rank, rec = ordered(job, stuck, lambda x: x[0], lambda x: x[1].t_start,
                        lambda x: x[1].seq)[0]
    peer, seq = rec.peer, waiting[rank].seq
    summary = (f"rank {rank} never received segment {rec.aux} of bucket "
               f"{waiting[rank].aux} from rank {peer} (ring step {rec.seq}, seq {seq})")
    detail = summary + "."
    if peer in states:
        detail += f"\nRank {peer} " + whereabouts(states[peer]) + "."
    return Finding(FindingKind.MISSING_COLLECTIVE, Severity.ERROR, (peer,), seq, summary, detail,
                   f"Look at why rank {peer} stopped sending: its stack and state above.",
                   {"group": waiting[rank].group, "ring_step": rec.seq, "segment": rec.aux,
                    "receiver": rank, "sender": peer})


def call_label(call: Call) -> str:
    """``all_reduce (DDP bucket 0)``, ``broadcast``."""
    bucket = f" (DDP bucket {call.aux})" if call.flags & L.RecordFlag.BUCKET else ""
    return f"{call.op}{bucket}"


def _ring_note(job: JobView, states: dict[int, RankState]) -> str:
    """The oldest ring receive still open, in a sentence (or "")."""
    stuck = [(r, rec) for r, s in states.items() if s.call is not None and r in job.ranks
             for rec in job.ranks[r].ring_steps[-64:]
             if rec.open and rec.parent == s.call.seq and rec.flags & L.RecordFlag.RECV]
    if not stuck:
        return ""
    rank, rec = ordered(job, stuck, lambda x: x[0], lambda x: x[1].t_start,
                        lambda x: x[1].seq)[0]
    return (f"The ring's oldest receive still open: rank {rank} waits for segment {rec.aux} "
            f"from rank {rec.peer} (ring step {rec.seq}); rank {rec.peer} is inside the "
            "call too, so it waits as well.")


def _links_of(job: JobView, facts: LinkFacts | None) -> LinkFacts:
    """The stalled links between the job's ranks (or towards a host of the job whose side
    was not captured): a rank's stalled connection to a service outside the job is not
    what its collective waits on.  ``facts`` None: read from the job's captures."""
    if facts is None:
        from ddpdoctor.analysis.load.connections import job_link_facts

        facts = job_link_facts(job)
    hosts = {str(run.header.host) for run in job.ranks.values()}
    return LinkFacts(facts.connections, tuple(k for k in facts.links if
                                              k.to_rank is not None or k.to_host in hosts))


def _on_links(what: str, call: Call, ranks: list[int], lines: list[str],
              facts: LinkFacts, evidence: dict) -> Finding:
    """The stalled_call of a call that stopped on the network: the links named, and every
    rank's connections to the others in the evidence."""
    links = list(facts.links)
    summary = f"{what} stalled on {links_summary(links)}; no rank is at fault"
    lines = lines + ["The connections that hold the ranks' bytes undelivered:"] + \
        [link_line(k) for k in links[:MAX_LINK_LINES]]
    if len(links) > MAX_LINK_LINES:
        lines.append(f"... and {len(links) - MAX_LINK_LINES} more connections.")
    return Finding(FindingKind.STALLED_CALL, Severity.ERROR, tuple(ranks), call.seq, summary,
                   "\n".join(lines), link_fix(links), {
                       **evidence, "links": [k.to_dict() for k in links],
                       "hosts": [list(p) for p in host_pairs(links)],
                       "connections": [c.to_dict() for c in
                                       facts.connections[:MAX_CONNECTIONS]]})


def stalled_call(job: JobView, states: dict[int, RankState],
                 links: LinkFacts | None = None) -> Finding | None:
    """Every rank of the job inside init_process_group (or new_group, or the same matched
    collective) and none missing in a job judged hung: no rank is at fault, the call itself
    does not complete.  ``links``: the ranks' connections (None: read from the job's
    captures); when some stalled, the finding names them."""
    if job.outcome != "hung" or len(states) < 2 or len(states) != job.world_size:
        return None
    call = None
    if all(s.kind == StateKind.RENDEZVOUS for s in states.values()):
        same = {(s.mark, s.mark_count if s.mark == "new_group" else 0) for s in states.values()}
        seq, group = None, "rendezvous"
        what = "init_process_group" if next(iter(same))[0] == "init" else "new_group"
    elif all(s.kind == StateKind.BLOCKED and s.call is not None for s in states.values()):
        same = {(s.call.group, s.call.seq, s.call.op) for s in states.values()}  # type: ignore
        group, seq, op = next(iter(same))
        what = f"{op} #{seq} on group {group}"
        call = next(iter(states.values())).call
    else:
        return None
    if len(same) != 1:
        return None
    first = min(states.values(), key=lambda s: s.rank)
    at = frame_text(first)
    by_frame: dict[str, list[int]] = {}
    for r, s in sorted(states.items()):
        by_frame.setdefault(frame_text(s), []).append(r)
    lines = [f"{ranks_text(rs).capitalize()} wait in {what}" + (f" at {f}" if f else "")
             + "." for f, rs in list(by_frame.items())[:16]]
    ring = _ring_note(job, states) if call is not None else ""
    if ring:
        lines.append(ring)
    notes = list(job.notices())
    if notes:
        lines.append("ddpdoctor noticed: " + " | ".join(notes))
    evidence = {"group": group, "stalled": what, "ranks": ranks_text(sorted(states)),
                "notices": notes}
    found = _links_of(job, links) if call is not None else LinkFacts()
    if found.links:
        return _on_links(call_label(call), call, sorted(states), lines, found,  # type: ignore
                         evidence)
    summary = (f"every rank ({len(states)}) is inside {what}" + (f" at {at}" if at else "") +
               " and none returns: no rank is missing, the call itself stalled")
    return Finding(FindingKind.STALLED_CALL, Severity.ERROR, tuple(sorted(states)), seq, summary,
                   "\n".join(lines), STALL_FIX, evidence)


def stalled_behind(job: JobView, states: dict[int, RankState], waits: list[Wait],
                   links: LinkFacts | None = None) -> Finding | None:
    """Every rank of the job blocked in a collective of one group; those behind are inside
    a call that every member entered (nobody is missing from it), the others went on and
    wait for them in a later call; and the connections hold bytes the network does not
    deliver.  The ranks behind never received their peers' part of that call: the link
    stopped, no rank is at fault (without stalled connections: None, the sinks' rule)."""
    if job.outcome != "hung" or len(states) < 2 or len(states) != job.world_size:
        return None
    if not all(s.kind == StateKind.BLOCKED and s.call is not None and
               s.call.kind == L.RecordKind.COLLECTIVE for s in states.values()):
        return None
    calls = {r: s.call for r, s in states.items()}
    if len({c.group for c in calls.values()}) != 1:  # type: ignore[union-attr]
        return None
    by_rank = {w.rank: w for w in waits}
    behind = sorted(r for r in states if r in by_rank and not by_rank[r].waits_for)
    ahead = sorted(r for r in states if r not in behind)
    stuck = {(calls[r].seq, calls[r].op) for r in behind}  # type: ignore[union-attr]
    if not behind or not ahead or len(stuck) != 1 or \
            any(not set(by_rank[r].waits_for) <= set(behind) for r in ahead):
        return None
    found = _links_of(job, links)
    if not found.links:
        return None
    call = calls[behind[0]]
    assert call is not None
    lines = [f"{ranks_text(behind).capitalize()} wait{'s' if len(behind) == 1 else ''} in "
             f"{call.describe()} (seq {call.seq} on group {call.group}) at {call.short_site}: "
             "every rank entered that call, and "
             f"{'it' if len(behind) == 1 else 'they'} never received the others' part of it."]
    for r in ahead:
        c = calls[r]
        assert c is not None
        lines.append(f"Rank {r} finished it, went on to {c.describe()} (seq {c.seq}) "
                     f"and waits there for {ranks_text(by_rank[r].waits_for)}.")
    evidence = {"group": call.group, "stalled": f"{call.op} #{call.seq} on group {call.group}",
                "ranks": ranks_text(sorted(states)), "behind": behind,
                "notices": list(job.notices())}
    return _on_links(call_label(call), call, sorted(states), lines, found, evidence)
