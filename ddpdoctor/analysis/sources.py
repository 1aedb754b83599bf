"""RankRuns built from facts other than ddpdoctor's own traces (flight recorder, stacks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import RankTrace, TraceHeader, TraceRecord

DEFAULT_GROUP = "0"


def mark_record(op: str, t_start: int, t_end: int, callsite: str = "") -> TraceRecord:
    """A MARK record such as ``init`` (init_process_group) or ``new_group``; ``t_end`` 0
    while the call is still running."""
    return TraceRecord(0, L.RecordKind.MARK, op, "", 0, 0, 0, t_start, t_end, 0, -1, 0, 0,
                       -1, (), (), (), callsite)


def external_run(rank: int, world_size: int, pid: int, host: str, path: Path,
                 calls: dict[str, list[Call]], group_ranks: dict[str, list[int]],
                 started_ns: int = 0, local_rank: int = -1,
                 meta: list[dict[str, Any]] | None = None,
                 marks: list[TraceRecord] | None = None,
                 state: L.RankState = L.RankState.COMPUTING) -> RankRun:
    """A rank known only from outside (no ddpdoctor trace): a header with ``state``, its
    calls by group (seq order), MARK records (init, new_group) and the groups' members;
    the default group is "0"."""
    header = TraceHeader(pid=pid, rank=rank, world_size=world_size,
                         local_rank=local_rank if local_rank >= 0 else rank,
                         state=state, exit_code=None, step=-1, epoch=-1,
                         count=0, heartbeat_ns=0, last_seq=-1, started_ns=started_ns,
                         host=host, run_id="", capacity=0)
    groups = [{"event": "group", "index": i, "name": name, "ranks": members,
               "default": name == DEFAULT_GROUP}
              for i, (name, members) in enumerate(sorted(group_ranks.items()))]
    trace = RankTrace(path, header, list(marks or []), groups + list(meta or []))
    ordered = {g: sorted(cs, key=lambda c: c.seq) for g, cs in calls.items()}
    collectives = {g: [c for c in cs if c.kind == L.RecordKind.COLLECTIVE]
                   for g, cs in ordered.items()}
    p2p = [c for cs in ordered.values() for c in cs if c.kind == L.RecordKind.P2P]
    return RankRun(rank, trace, {g: cs for g, cs in collectives.items() if cs}, p2p, [], [],
                   dict(group_ranks))
