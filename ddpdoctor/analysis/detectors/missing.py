"""missing_collective: ranks wait in a collective that others never entered (or that stalls)."""

from __future__ import annotations

import os

from ddpdoctor.analysis.detectors.failure import failure_of, stop_time
from ddpdoctor.analysis.model import NS, Call, Finding, JobView, RankRun, Severity
from ddpdoctor.analysis.source import rank_condition
from ddpdoctor.trace import layout as L

INTERNAL_PARTS = ("site-packages", "/torch/", "/ddpdoctor/", "/lib/python3")


def user_frame(run: RankRun) -> str | None:
    """The innermost frame of the user's code in the rank's py-spy stack."""
    for frame in run.stack or []:
        fn = str(frame.get("filename", ""))
        if fn and not any(p in fn for p in INTERNAL_PARTS):
            return f"{os.path.basename(fn)}:{frame.get('line')} in {frame.get('name')}"
    return None


def whereabouts(run: RankRun, group: str, job: JobView) -> str:
    """Where a rank that never entered the awaited collective is instead."""
    last = run.last_call(group)
    after = f"after seq {last.seq} ({last.describe()} at {last.short_site})" if last else \
        "before its first collective"
    if run.exited_cleanly():
        return f"exited cleanly {after}"
    if run.alive is False:
        return f"is gone {after}"
    if run.proc_state == "T":
        return f"is stopped (SIGSTOP) {after}"
    elsewhere = run.open_call()
    if elsewhere is not None and elsewhere.group != group:
        return (f"waits in {elsewhere.describe()} on group {elsewhere.group} at "
                f"{elsewhere.short_site} {after}")
    frame = user_frame(run)
    return f"is computing at {frame} {after}" if frame else f"is running {after}"


def _stalled_ring(job: JobView, waiting: dict[int, Call]) -> Finding | None:
    """All ranks inside the same collective: name the ring step that never completed."""
    stuck = []
    for rank, call in waiting.items():
        run = job.ranks[rank]
        for rec in run.ring_steps[-64:]:
            if rec.open and rec.parent == call.seq and rec.flags & L.RecordFlag.RECV:
                stuck.append((rank, rec))
    if not stuck:
        return None
    rank, rec = min(stuck, key=lambda x: x[1].t_start)
    peer = rec.peer
    seq = waiting[rank].seq
    summary = (f"rank {rank} never received segment {rec.aux} of bucket "
               f"{waiting[rank].aux} from rank {peer} (ring step {rec.seq}, seq {seq})")
    peer_run = job.ranks.get(peer)
    detail = summary + "."
    if peer_run is not None:
        detail += f"\nRank {peer} " + whereabouts(peer_run, waiting[rank].group, job) + "."
    return Finding("missing_collective", Severity.ERROR, (peer,), seq, summary, detail,
                   f"Look at why rank {peer} stopped sending: its stack and state above.",
                   {"group": waiting[rank].group, "ring_step": rec.seq, "segment": rec.aux,
                    "receiver": rank, "sender": peer})


def detect(job: JobView) -> list[Finding]:
    findings = []
    threshold = job.hang_timeout * NS
    stop_ns = stop_time(job)
    # A rank that died of its own failure inside a call waits for nothing; one that died
    # of a peer's absence (connection closed) was waiting for that peer.
    failures = {r: failure_of(run, stop_ns) for r, run in job.ranks.items()}
    died = {r for r, f in failures.items() if f is not None and not f.symptom}
    for group in job.groups():
        members = [r for r in job.group_members(group) if r in job.ranks]
        waiting = {}
        for r in members:
            if r in died:  # a rank that died inside a call waits for nothing
                continue
            last = job.ranks[r].last_call(group)
            if last is not None and last.open and (
                    job.outcome == "hung" or not job.live
                    or job.now_ns - last.t_start >= threshold):
                waiting[r] = last
        if not waiting:
            continue
        seq = max(c.seq for c in waiting.values())
        absent = [r for r in members
                  if r not in waiting and ((job.ranks[r].last_call(group) is None)
                                           or job.ranks[r].last_call(group).seq < seq)]
        if not absent:
            ring = _stalled_ring(job, waiting)
            if ring:
                findings.append(ring)
            continue
        call = next(c for c in waiting.values() if c.seq == seq)
        cond = rank_condition(call.callsite)
        where = "; ".join(f"rank {r} {whereabouts(job.ranks[r], group, job)}" for r in absent)
        waited = (job.now_ns - call.t_start) / NS
        summary = (f"rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, sorted(waiting)))} "
                   f"wait{'' if len(waiting) > 1 else 's'} in {call.describe()} at "
                   f"{call.short_site} (seq {seq}) that rank{'s' if len(absent) > 1 else ''} "
                   f"{', '.join(map(str, absent))} never entered")
        detail = (f"{summary}.\n{where}.\nWaiting for {waited:.1f} s."
                  + (f"\nThe awaited call is inside {cond}: it runs on some ranks only."
                     if cond else ""))
        fix = ("Every rank must reach the same collectives: "
               + ("move the collective out of the rank-dependent branch or call it on every "
                  "rank." if cond else
                  "check why the absent rank took another path (see its stack), e.g. an "
                  "early exit, a different number of batches, or a rank-dependent branch."))
        evidence = {"group": group, "waiting": {str(r): c.callsite for r, c in waiting.items()},
                    "absent": {str(r): whereabouts(job.ranks[r], group, job) for r in absent},
                    "waited_s": round(waited, 3)}
        # A collective under a rank-dependent branch is the waiting ranks' fault; otherwise
        # the ranks that went elsewhere are.
        culprits = tuple(sorted(waiting)) if cond else tuple(absent)
        evidence["condition"] = cond
        findings.append(Finding("missing_collective", Severity.ERROR, culprits, seq,
                                summary, detail, fix, evidence))
    return findings
