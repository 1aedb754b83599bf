"""An all-to-all whose split sizes disagree, from what was recorded or from how it ended.

An all_to_all_single is recorded with one shape per peer when the call passes split sizes
(rank i's input rows for rank j must be rank j's output rows for rank i): ``recorded_splits``
checks that, before any rank fails.  Without them (an older trace, more peers than a record
holds), the tensors' shapes agree whatever the splits, so the matcher sees nothing; gloo
aborts the rank that receives more or less than its output split sizes
say ("Received data size doesn't match expected size") while the sender, whose part went
out, returns.  Which rank computed its sizes wrongly is not in the trace: every rank of the
exchange is named, and the fix is to exchange the sizes first."""

from __future__ import annotations

from ddpdoctor.analysis.explain.cause import SPLIT_FIX
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.model import Call, Finding, FindingKind, JobView, Severity, ranks_text
from ddpdoctor.analysis.load.user_source import source_line
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


def _exchanges(job: JobView, group: str, members: list[int]) -> dict[int, dict[int, Call]]:
    """seq -> rank -> the all_to_all_single each member called there, recorded per peer."""
    by_seq: dict[int, dict[int, Call]] = {}
    for r in members:
        run = job.ranks.get(r)
        for c in (run.calls.get(group, []) if run is not None else []):
            if c.op == "all_to_all_single" and len(c.in_shapes) == len(members) == \
                    len(c.out_shapes):
                by_seq.setdefault(c.seq, {})[r] = c
    return by_seq


def _wrong_pairs(calls: dict[int, Call], members: list[int]) -> list[tuple[int, int, int, int]]:
    """(sender, receiver, rows sent, rows expected) for every pair whose sizes disagree."""
    pairs = []
    for i, a in enumerate(members):
        for j, b in enumerate(members):
            sent, expected = calls[a].in_shapes[j], calls[b].out_shapes[i]
            if sent[:1] != expected[:1]:
                pairs.append((a, b, sent[0] if sent else 0, expected[0] if expected else 0))
    return pairs


def _changed(job: JobView, c: Call) -> str:
    """How the rank's own split sizes at ``c`` differ from its previous exchange there."""
    run = job.ranks.get(c.rank)
    before = [p for p in (run.calls.get(c.group, []) if run is not None else [])
              if p.op == c.op and p.seq < c.seq and p.callsite == c.callsite]
    rows = [s[0] if s else 0 for s in c.in_shapes]
    if before:
        old = [s[0] if s else 0 for s in before[-1].in_shapes]
        if old != rows:
            return f"rank {c.rank} sent {rows} rows, after {old} at its previous step"
    return ""


def _broke_pattern(changes: dict[int, str],
                   pairs: list[tuple[int, int, int, int]]) -> tuple[int, ...]:
    """The ranks whose own split sizes changed here (``changes``: rank -> how, "" when not)
    while the others' did not, when every pair that disagrees has one of them: the evidence
    of their own history."""
    moved = tuple(sorted(r for r, how in changes.items() if how))
    if not moved or len(moved) == len(changes):
        return ()
    return moved if all(a in moved or b in moved for a, b, _, _ in pairs) else ()


def recorded_splits(job: JobView) -> Finding | None:
    """The first all_to_all_single whose recorded split sizes disagree across its ranks."""
    for group in job.groups():
        members = job.group_members(group)
        by_seq = _exchanges(job, group, members)
        for seq in sorted(by_seq):
            calls = by_seq[seq]
            if len(calls) != len(members):
                continue
            pairs = _wrong_pairs(calls, members)
            if not pairs:
                continue
            c = calls[members[0]]
            involved = tuple(sorted({r for p in pairs for r in p[:2]}))
            told = "; ".join(f"rank {a} sends {n} rows to rank {b}, which expects {m}"
                             for a, b, n, m in pairs[:4])
            changes = {r: _changed(job, call) for r, call in calls.items()}
            moved = [changes[r] for r in involved if changes[r]]
            broke = _broke_pattern(changes, pairs)
            ranks = broke or involved
            src = source_line(c.callsite)
            summary = (f"the split sizes of {c.op} #{seq} at {c.short_site} disagree across "
                       f"ranks: {told}; " + (
                           f"{ranks_text(broke)} changed {'its' if len(broke) == 1 else 'their'}"
                           " own split sizes here and no peer's output sizes followed"
                           if broke else "each rank computed its own sizes, and no rank can "
                           "be singled out"))
            detail = "\n".join([
                f"{c.op} at {c.short_site}" + (f" `{src}`" if src else "") + " exchanges "
                "rows by split sizes: rank i's input_split_sizes[j] must equal rank j's "
                "output_split_sizes[i].",
                *(f"What changed: {m}." for m in moved[:2]),
                "gloo aborts a rank that receives more or less than it expects; NCCL hangs "
                "or corrupts the rows."])
            return Finding(FindingKind.COLLECTIVE_MISMATCH.value, Severity.ERROR, ranks, seq,
                           summary, detail, SPLIT_FIX,
                           {"group": group, "differs": "split sizes", "op": c.op,
                            "callsite": c.callsite, "no_majority": True,
                            "pairs": [{"from": a, "to": b, "sent": n, "expected": m}
                                      for a, b, n, m in pairs]})
    return None


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
