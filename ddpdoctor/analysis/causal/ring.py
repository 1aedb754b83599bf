"""A collective every member entered that never completes: the ring step that stalled."""

from __future__ import annotations

from ddpdoctor.analysis.causal.findings import whereabouts
from ddpdoctor.analysis.causal.state import RankState
from ddpdoctor.analysis.clocks import ordered
from ddpdoctor.analysis.model import Call, Finding, JobView, Severity
from ddpdoctor.trace import layout as L


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
