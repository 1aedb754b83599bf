"""Every rank inside one call and none returns: the stalled ring step, collective or rendezvous."""

from __future__ import annotations

from ddpdoctor.analysis.causal.findings import frame_text, ranks_text, whereabouts
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.clocks import ordered
from ddpdoctor.analysis.model import Call, Finding, JobView, Severity
from ddpdoctor.trace import layout as L

STALL_FIX = ("Nothing in the ranks' own code differs: look at what carries the call. For gloo, "
             "check that every rank can reach MASTER_ADDR and every other rank's address "
             "(GLOO_SOCKET_IFNAME picks the interface; a firewall or a hostname that resolves "
             "to another host's interface stalls the connections); for NCCL, NCCL_DEBUG=INFO. "
             "An environment variable torch cannot parse can stall it too: see the notices.")


def stalled_ring(job: JobView, waiting: dict[int, Call],
                 states: dict[int, RankState]) -> Finding | None:
    """The oldest ring receive that never completed, blaming its sender."""
    stuck = []
    for rank, call in waiting.items():
        for rec in job.ranks[rank].ring_steps[-64:]:
            if rec.open and rec.parent == call.seq and rec.flags & L.RecordFlag.RECV:
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
    return Finding("missing_collective", Severity.ERROR, (peer,), seq, summary, detail,
                   f"Look at why rank {peer} stopped sending: its stack and state above.",
                   {"group": waiting[rank].group, "ring_step": rec.seq, "segment": rec.aux,
                    "receiver": rank, "sender": peer})


def stalled_call(job: JobView, states: dict[int, RankState]) -> Finding | None:
    """Every rank of the job inside init_process_group (or new_group, or the same matched
    collective) and none missing in a job judged hung: no rank is at fault, the call itself
    does not complete."""
    if job.outcome != "hung" or len(states) < 2 or len(states) != job.world_size:
        return None
    if all(s.kind == StateKind.RENDEZVOUS for s in states.values()):
        same = {(s.mark, s.mark_count if s.mark == "new_group" else 0) for s in states.values()}
        seq, group = None, "rendezvous"
        what = "init_process_group" if next(iter(same))[0] == "init" else "new_group"
    elif all(s.kind == StateKind.BLOCKED and s.call is not None for s in states.values()):
        same = {(s.call.group, s.call.seq, s.call.op) for s in states.values()}  # type: ignore
        group, seq, op = next(iter(same))
        what = f"{op} #{seq} on group {group}"
    else:
        return None
    if len(same) != 1:
        return None
    first = min(states.values(), key=lambda s: s.rank)
    at = frame_text(first)
    summary = (f"every rank ({len(states)}) is inside {what}" + (f" at {at}" if at else "") +
               " and none returns: no rank is missing, the call itself stalled")
    by_frame: dict[str, list[int]] = {}
    for r, s in sorted(states.items()):
        by_frame.setdefault(frame_text(s), []).append(r)
    lines = [f"{ranks_text(rs).capitalize()} wait in {what}" + (f" at {f}" if f else "")
             + "." for f, rs in list(by_frame.items())[:16]]
    notes = list(job.notices())
    if notes:
        lines.append("ddpdoctor noticed: " + " | ".join(notes))
    return Finding("stalled_call", Severity.ERROR, tuple(sorted(states)), seq, summary,
                   "\n".join(lines), STALL_FIX,
                   {"group": group, "stalled": what, "ranks": ranks_text(sorted(states)),
                    "notices": notes})
