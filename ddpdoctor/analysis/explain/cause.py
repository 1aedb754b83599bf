"""The cause a finding states, from facts, and the one fix that follows from that cause.

A finding blames some ranks for a call (or its absence); what made those ranks take their
own path is a decision in the user's source: a branch on the rank, a branch or loop exit
on rank-local input (a metric, a clock, the file system, a token count, a random draw, an
exception), or DDP's no_sync() chosen on such input.  The fix is derived from that decision
and from the culprits' own call, never from a call a waiting rank happened to make."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ddpdoctor.analysis.explain.loop_exits import loop_exit
from ddpdoctor.analysis.explain.mechanisms import fix_for as origin_fix
from ddpdoctor.analysis.explain.decisions import (Decision, Reads, branch_decision, from_exit,
                                          left_loop, no_sync_decision)
from ddpdoctor.analysis.model import FindingKind, Call, Finding, JobView, ranks_text, ranks_values
from ddpdoctor.analysis.load.user_source import file_mentions, rank_condition
from ddpdoctor.trace.origin import Origin


class CauseKind(str, enum.Enum):
    """What the finding says made the culprits' calls differ."""

    RANK_BRANCH = "rank_branch"  # their call sits under a rank-dependent condition
    LOCAL_DECISION = "local_decision"  # a branch, loop exit or no_sync() on rank-local input
    IMPLICIT = "implicit"  # an API made the call on their behalf
    SHAPE = "shape"
    DTYPE = "dtype"
    REDUCE_OP = "reduce op"
    ROOT = "root rank"
    ORDER = "order"  # differing calls with no decision found in the source
    SWAPPED = "swapped"  # the same calls on every rank, in another order (dict or set order)


@dataclass(frozen=True)
class Cause:
    """The cause of a finding: its kind, the culprits' call and the decision behind it."""

    kind: CauseKind
    ranks: tuple[int, ...]
    call: Call | None
    decision: Decision | None = None
    condition: str | None = None  # the rank-dependent condition (RANK_BRANCH)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind.value, "ranks": list(self.ranks),
                "call": self.call.callsite if self.call is not None else None,
                "decision": self.decision.to_dict() if self.decision else None,
                "condition": self.condition}


_BY_DIFFERENCE = {"shape": CauseKind.SHAPE, "dtype": CauseKind.DTYPE,
                  "reduce op": CauseKind.REDUCE_OP, "root rank": CauseKind.ROOT}


def decision_of(call: Call, others: list[Call]) -> Decision | None:
    """The decision that put ``call`` where the ``others`` (other ranks' calls at the same
    place) are not: the branch on rank-local input around it, the no_sync() choice before
    its backward, or the loop exit by which its rank left the loop they are still in."""
    found = branch_decision(call.callsite)
    if found is None and call.origin == Origin.DDP_BACKWARD:
        found = no_sync_decision(call.callsite)
    for o in others:
        if found is None and o.callsite and o.callsite != call.callsite:
            found = left_loop(o.callsite, call.callsite)
    if found is not None and found.reads == Reads.RANK and found.statement in ("if", "while"):
        return None  # a rank test at the call: the rank-dependent branch tells it
    return found


def skip_of(missed: Call) -> Decision | None:
    """The `continue` by which a rank skipped ``missed`` (a call the others made), with
    what decided it."""
    skip = loop_exit(missed.callsite, skipped=True)
    found = from_exit(skip) if skip is not None else None
    return found if found is not None and found.reads != Reads.RANK else None


def mismatch_cause(ranks: tuple[int, ...], calls: dict[int, Call], differs: str,
                   missed: Call | None = None) -> Cause:
    """The cause of differing calls at one seq, ``ranks`` blamed: a rank-dependent branch
    around the culprits' call (or around the others' call, which the culprits skipped);
    else a decision on rank-local input (``missed``: the call the alignment says the
    culprits skipped); else an API's call; else what differs."""
    mine = [c for r, c in calls.items() if r in ranks]
    theirs = [c for r, c in calls.items() if r not in ranks]
    call = mine[0] if mine else next(iter(calls.values()))
    cond = next((x for c in mine if (x := rank_condition(c.callsite))), None)
    if cond is not None:
        return Cause(CauseKind.RANK_BRANCH, ranks, call, condition=cond)
    for c in theirs:  # the others' call sits under a rank-dependent branch the culprits skipped
        if (cond := rank_condition(c.callsite)) is not None:
            return Cause(CauseKind.RANK_BRANCH, ranks, c, condition=cond)
    decision = next((d for c in mine if (d := decision_of(c, theirs))), None)
    if decision is None and missed is not None:  # they skipped a call the others made
        decision = skip_of(missed)
    if decision is None and theirs:  # a skip of the others' call on rank-local input
        decision = next((d for c in theirs[:1] if (d := skip_of(c)) and d.reads.rank_local),
                        None)
    if decision is not None:
        return Cause(CauseKind.LOCAL_DECISION, ranks, call, decision)
    if call.origin.implicit and theirs and all(c.callsite != call.callsite for c in theirs):
        return Cause(CauseKind.IMPLICIT, ranks, call)
    same_site = all(c.callsite == call.callsite and c.op == call.op for c in theirs)
    kind = _BY_DIFFERENCE.get(differs) if same_site or differs != "call" else None
    return Cause(kind or CauseKind.ORDER, ranks, call)


ORDER_FIX = ("Make every rank call the same collectives in the same order: a collective "
             "inside a rank-dependent branch must have a matching call on every other rank "
             "(move it out of the branch, or call it on all ranks).")
SHAPE_FIX = ("Give the collective tensors of the same size on every rank: pad to the largest "
             "size (gather the sizes first), use drop_last=True, or all_gather_object for "
             "ragged data.")
SPLIT_FIX = ("Exchange the split sizes before the all_to_all_single: each rank's "
             "output_split_sizes must be the peers' input_split_sizes for it (all_to_all the "
             "sizes first, then the data).")
SWAPPED_FIX = ("Make the calls in one order on every rank: the ranks make the same "
               "collectives, each in its own order (iterate the names in sorted order, "
               "`for name in sorted(metrics)`, or stack the values into one tensor and "
               "reduce it once).")
FIXES = {CauseKind.SHAPE: SHAPE_FIX, CauseKind.SWAPPED: SWAPPED_FIX,
         CauseKind.DTYPE: "Cast to one dtype on every rank before the collective "
                          "(e.g. `t.float()`).",
         CauseKind.REDUCE_OP: "Use the same reduce op (ReduceOp.SUM, ...) on every rank.",
         CauseKind.ROOT: "Pass the same src/dst rank on every rank.",
         CauseKind.ORDER: ORDER_FIX}
_TOGETHER = {
    Reads.METRIC: "all-reduce the validation score (or the stop flag) before the check, so "
                  "that every rank sees the same value",
    Reads.CLOCK: "let rank 0 read its clock and broadcast the decision (or all-reduce the "
                 "elapsed time, MAX), so that every rank acts in the same step",
    Reads.FILES: "let rank 0 look at the file system and broadcast what it found",
    Reads.DATA: "all-reduce the flag or count the condition reads (MAX of a 0/1 flag, the "
                "token count), so that every rank takes the branch in the same step",
    Reads.RANDOM: "draw from a generator seeded the same on every rank, or broadcast rank "
                  "0's draw",
    Reads.EXCEPTION: "all-reduce a 0/1 'failed' flag after the try block and act on it "
                     "together",
}


def fix_for(cause: Cause) -> str:
    """The fix that follows from the cause (its decision, the culprits' own call)."""
    call = cause.call
    if cause.kind == CauseKind.RANK_BRANCH and call is not None:
        if call.origin.implicit and origin_fix(call):
            return origin_fix(call)  # type: ignore[return-value]
        where = f"in the {cause.condition}" if str(cause.condition).startswith("else") \
            else f"where {cause.condition} holds"
        return (f"The {call.describe()} at {call.short_site} runs only {where}: call it on "
                "every rank of the group (keep only the printing or saving under the "
                "condition), or on none.")
    if cause.kind == CauseKind.LOCAL_DECISION and cause.decision is not None:
        d = cause.decision
        how = _TOGETHER.get(d.reads, "let one rank decide and broadcast the decision")
        text = f"Decide together at {d.text()}: {how}."
        if d.statement == "no_sync":
            text += (" Or leave no_sync() on a schedule every rank shares (every N "
                     "micro-batches).")
        elif d.statement == "continue" and call is not None and \
                call.origin == Origin.DDP_BACKWARD:
            text += (" With DDP, a step that must not count can run backward on a zeroed "
                     "loss (loss * 0): the gradient all-reduces stay in step.")
        return text
    if cause.kind == CauseKind.IMPLICIT and call is not None and origin_fix(call):
        return origin_fix(call)  # type: ignore[return-value]
    if cause.kind == CauseKind.SHAPE and call is not None and call.op == "all_to_all_single":
        return SPLIT_FIX
    if cause.kind == CauseKind.SHAPE and call is not None and \
            file_mentions(call.callsite, "drop_last=True"):  # (it has it: not that advice)
        return ("Give the collective tensors of the same size on every rank: pad to the "
                "largest size (gather the sizes first), or all_gather_object for ragged data.")
    return FIXES.get(cause.kind, ORDER_FIX)


def backward_counts(job: JobView, group: str, until_seq: int | None) -> dict[int, int]:
    """Each rank's synced backward passes (DDP's first bucket) on ``group`` up to
    ``until_seq``; empty when no rank made one."""
    out = {}
    for r, run in job.ranks.items():
        calls = run.calls.get(group, [])
        out[r] = sum(1 for c in calls if c.origin == Origin.DDP_BACKWARD and c.aux == 0 and
                     (until_seq is None or c.seq <= until_seq))
    return out if any(out.values()) else {}


def counts_text(counts: dict[int, int]) -> str:
    """``synced backward passes: rank 0: 7, rank 1: 6`` ("" when they agree)."""
    if len(set(counts.values())) < 2:
        return ""
    return "synced backward passes: " + ranks_values(counts)


def with_frame_decision(f: Finding) -> Finding:
    """A missing_collective whose absent rank sits under a branch or loop on rank-local
    input (``while not os.path.exists(...)``, ``if time.time() > ...``): that decision told,
    the finding's own fix kept (it already speaks of where the rank is)."""
    frame = f.evidence.get("frame")
    if f.kind != FindingKind.MISSING_COLLECTIVE or not isinstance(frame, str) or len(f.ranks) != 1:
        return f
    d = branch_decision(frame)
    if d is None or d.callsite in f.detail:
        return f
    lead = f"{ranks_text(f.ranks)} is held at {d.text()}"
    cause = Cause(CauseKind.LOCAL_DECISION, f.ranks, None, d)
    return replace(f, summary=f"{f.summary}; {lead}", detail=f"{f.detail}\n{lead}.",
                   evidence={**f.evidence, "why": cause.to_dict()})


def with_cause(f: Finding, cause: Cause, job: JobView | None) -> Finding:
    """``f`` told the decision behind its cause (when the finding does not say it yet), the
    ranks' counts of synced backward passes where they differ, and the cause's fix."""
    summary, detail = f.summary, f.detail
    evidence = {**f.evidence, "why": cause.to_dict()}
    d = cause.decision
    if d is not None and d.callsite not in detail:
        lead = f"{ranks_text(cause.ranks)} took its own path at {d.text()}"
        summary, detail = f"{lead}; {summary}", f"{lead}.\n{detail}"
    group = f.evidence.get("group")
    if job is not None and isinstance(group, str):
        counts = backward_counts(job, group, f.seq)
        told = counts_text(counts)
        if told and told not in detail:
            detail += f"\nBy then, {told}."
            evidence["counts"] = {"synced_backward_passes": {str(r): n for r, n
                                                             in counts.items()}}
    return replace(f, summary=summary, detail=detail, fix=fix_for(cause), evidence=evidence)
