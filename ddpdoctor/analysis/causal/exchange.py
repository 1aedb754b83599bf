"""An all-to-all whose split sizes disagree: one rank aborts in the exchange its peer completed.

The recorded shapes of an all_to_all_single agree whatever its split sizes, so the matcher
sees nothing; gloo aborts the rank that receives more or less than its output split sizes
say ("Received data size doesn't match expected size") while the sender, whose part went
out, returns.  Which rank computed its sizes wrongly is not in the trace: every rank of the
exchange is named, and the fix is to exchange the sizes first."""

from __future__ import annotations

from ddpdoctor.analysis.causal.cause import SPLIT_FIX
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.model import Call, Finding, FindingKind, JobView, Severity, ranks_text
from ddpdoctor.analysis.source import source_line
from ddpdoctor.trace import layout as L

EXCHANGES = ("all_to_all_single", "all_to_all")
SIZE_WORDS = ("size", "split", "preamble", "nbytes")


def _aborted_in_exchange(s: RankState) -> bool:
    d, c = s.death, s.call
    if d is None or c is None or c.op not in EXCHANGES:
        return False
    return d.signal == "SIGABRT" or any(w in d.detail.lower() for w in SIZE_WORDS)


def _completed(job: JobView, rank: int, call: Call) -> Call | None:
    run = job.ranks.get(rank)
    theirs = next((c for c in (run.calls.get(call.group, []) if run else [])
                   if c.seq == call.seq), None)
    ok = theirs is not None and not theirs.open and \
        not theirs.flags & L.RecordFlag.FAILED and theirs.op == call.op
    return theirs if ok else None


def split_sizes_mismatch(job: JobView, states: dict[int, RankState]) -> Finding | None:
    """The finding of an all-to-all a rank aborted in while a peer completed it."""
    for s in sorted(states.values(), key=lambda s: s.rank):
        if s.kind not in (StateKind.DIED, StateKind.PEER_FAILED) or \
                not _aborted_in_exchange(s):
            continue
        c = s.call
        assert c is not None
        members = job.group_members(c.group)
        done = sorted(r for r in members if r != s.rank and _completed(job, r, c))
        if not done:
            continue
        src = source_line(c.callsite)
        cause = s.death.cause  # type: ignore[union-attr]
        summary = (f"the split sizes of {c.op} #{c.seq} at {c.short_site} disagree across "
                   f"ranks: {ranks_text(done)} completed the exchange while rank {s.rank} "
                   f"aborted in it ({cause}); each rank computed its own sizes, and the "
                   "trace cannot tell whose are wrong")
        detail = "\n".join([
            f"{c.op} at {c.short_site}" + (f" `{src}`" if src else "") + " exchanges rows "
            "by split sizes: rank i's input_split_sizes[j] must equal rank j's "
            "output_split_sizes[i].",
            "The tensors' shapes agree (they are all the matcher sees), so the sizes that "
            "disagree are the splits: gloo aborts the rank that receives more or less than "
            "it expects (\"Received data size doesn't match expected size\"), while a rank "
            "whose part went out returns.",
            f"Rank {s.rank}: {s.death.detail[:600]}"])  # type: ignore[union-attr]
        ranks = tuple(sorted(members))
        return Finding(FindingKind.COLLECTIVE_MISMATCH.value, Severity.ERROR, ranks, c.seq,
                       summary, detail, SPLIT_FIX,
                       {"group": c.group, "differs": "split sizes", "op": c.op,
                        "callsite": c.callsite, "aborted": [s.rank], "completed": done,
                        "no_majority": True})
    return None
