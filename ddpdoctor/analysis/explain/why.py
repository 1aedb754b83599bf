"""Why, not only who: each origin's mechanism and fix, and where the ranks went out of step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ddpdoctor.analysis.align.out_of_step import OutOfStep, out_of_step
from ddpdoctor.analysis.explain.loop_exits import LoopExit, loop_exit
from ddpdoctor.analysis.align.iterations import SkippedIteration, skipped_iterations
from ddpdoctor.analysis.model import Call, Finding, FindingKind, JobView, Severity, ranks_text
from ddpdoctor.analysis.load.user_source import declares_launcher, rank_condition, source_line
from ddpdoctor.analysis.explain.mechanisms import MECHANISMS, fix_for
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.record import short_site as _short



def mechanism(call: Call) -> str:
    """What the call does on the user's behalf, in a sentence ("" for the user's own)."""
    words = MECHANISMS.get(call.origin)
    if words is None:
        return ""
    text = words[0]
    if call.origin == Origin.FRAMEWORK and call.framework_site:
        pkg = call.framework_site.split("/", 1)[0]
        text = text.replace("the framework's helper", f"{pkg}'s helper") + \
            f" at {call.framework_site}"
    cond = rank_condition(call.callsite)
    if call.origin == Origin.DDP_FORWARD and cond:
        text = text.replace("calling the DDP model is", f"calling the DDP model inside {cond} "
                            "(on some ranks alone) is")
    return f"The {call.describe()} at {call.short_site} was issued by {_api(call)}: {text}."


def _api(call: Call) -> str:
    return {Origin.DDP_FORWARD: "DDP's forward", Origin.DDP_BACKWARD: "DDP's backward",
            Origin.DDP_INIT: "DDP's constructor", Origin.ZERO: "ZeroRedundancyOptimizer",
            Origin.SYNC_BN: "SyncBatchNorm", Origin.OBJECT: "an object collective",
            Origin.JOIN: "torch's Join", Origin.FRAMEWORK: "a framework helper"}.get(
                call.origin, "the user's call")


def step_evidence(oos: OutOfStep) -> dict[str, Any]:
    """The out-of-step place as report evidence."""
    c = oos.call
    return {"group": oos.group, "seq": min(oos.seqs.values()), "seqs": {
                str(r): s for r, s in oos.seqs.items()},
            "ranks": list(oos.culprits), "extra": oos.extra, "probable": oos.probable,
            "op": c.op, "callsite": c.callsite, "source": source_line(c.callsite),
            "condition": rank_condition(c.callsite), "origin": c.origin.value,
            "framework_site": c.framework_site or None}


def step_text(oos: OutOfStep) -> str:
    """``rank 0 went out of step at seq 4: it called all_reduce(...) at train.py:40 ...``"""
    c = oos.call
    seq = min(oos.seqs.values())
    src = source_line(c.callsite)
    cond = rank_condition(c.callsite)
    at = f"{c.describe()} at {c.short_site}" + (f" `{src}`" if src else "") + \
        (f" (inside {cond})" if cond else "")
    hedge = "probably " if oos.probable else ""
    if oos.extra:
        return (f"{ranks_text(oos.culprits)} {hedge}went out of step at seq {seq} on group "
                f"{oos.group}: it called {at}, which {ranks_text(oos.missed_by)} never called")
    return (f"{ranks_text(oos.culprits)} {hedge}went out of step at seq {seq} on group "
            f"{oos.group}: it skipped {at}, which {ranks_text(oos.made_by)} called")


def find_step(job: JobView, group: str, until_seq: int | None) -> OutOfStep | None:
    """The earliest extra or missing call of ``group`` in ``job`` up to ``until_seq``."""
    by_rank = {r: run.calls[group] for r, run in job.ranks.items() if group in run.calls}
    return out_of_step(by_rank, group, until_seq, rank_condition)


def with_step(f: Finding, oos: OutOfStep, surfaced: str, blame: bool) -> Finding:
    """``f`` told where the ranks went out of step (and blaming its culprits when
    ``blame``); ``surfaced``: where it showed, in words."""
    how = mechanism(oos.call)
    lead = step_text(oos)
    summary = f"{lead}; it surfaced {surfaced}"
    detail = f"{lead}.\n" + (f"{how}\n" if how else "") + \
        f"It surfaced {surfaced}:\n{f.detail}"
    fix = fix_for(oos.call) or f.fix
    if oos.call.origin == Origin.USER:
        fix = ("Make every rank call the same collectives in the same order: the call at "
               f"{oos.call.short_site} must be made on every rank of the group or on none "
               "(move it out of the rank-dependent branch).") if oos.extra else f.fix
    evidence = {**f.evidence, "out_of_step": step_evidence(oos)}
    if fix != f.fix:  # the cause is now where they went out of step, not what surfaced
        cond = rank_condition(oos.call.callsite)
        evidence["why"] = {"kind": "rank_branch" if cond else "order",
                           "ranks": list(oos.culprits), "call": oos.call.callsite,
                           "decision": None, "condition": cond}
    return replace(f, ranks=tuple(oos.culprits) if blame else f.ranks, summary=summary,
                   detail=detail, fix=fix, evidence=evidence)


DECIDE_TOGETHER = ("Decide together: let one rank decide and broadcast the decision, or "
                   "all-reduce the flag (e.g. MAX of a 0/1 tensor) so that every rank skips "
                   "or stops in the same iteration.")


ZERO_LOSS = (" With DDP, a step that must not count can run backward on a zeroed loss "
             "(loss * 0): the gradient all-reduces stay in step.")


def skip_text(skip: SkippedIteration, exit_: LoopExit | None) -> str:
    """``rank 1 skipped iteration 2 (epoch 0, batch 2): ...``"""
    m = skip.missed
    text = (f"{ranks_text(skip.ranks)} skipped iteration {skip.index} (loader epoch "
            f"{skip.epoch}, batch {skip.batch}): it drew the batch and drew the next one "
            f"without {m.describe()} at {m.short_site}, which the other ranks made for it")
    if exit_ is not None:
        text += (f"; the skip is `{exit_.source}` at {_short(exit_.callsite)}"
                 + (f" under {exit_.condition}" if exit_.condition else "")
                 + f", decided by {exit_.decided_by}")
    return text


def with_skip(f: Finding, skip: SkippedIteration) -> Finding:
    """``f`` told which iteration its culprits skipped, the line of the skip and what
    made the rank decide alone, with the fix that makes the ranks decide together."""
    exit_ = loop_exit(skip.missed.callsite, skipped=True)
    lead = skip_text(skip, exit_)
    how = mechanism(skip.missed)
    detail = f"{lead}.\n" + (f"{how}\n" if how else "") + \
        "From then on its collectives met the other ranks' calls of a later iteration " \
        f"until the job stopped:\n{f.detail}"
    evidence = {"rank": list(skip.ranks), "iteration": skip.index, "epoch": skip.epoch,
                "batch": skip.batch, "missed": skip.missed.callsite}
    if exit_ is not None:
        evidence.update(statement=exit_.statement, callsite=exit_.callsite,
                        source=exit_.source, condition=exit_.condition,
                        decided_by=exit_.decided_by)
    fix = _decided_fix(exit_, skip.ranks, skip.missed) if exit_ is not None else \
        DECIDE_TOGETHER + (ZERO_LOSS if skip.missed.origin == Origin.DDP_BACKWARD else "")
    return replace(f, summary=f"{lead}; {f.summary}", detail=detail, fix=fix,
                   evidence={**f.evidence, "skipped_iteration": evidence})


def _decided_fix(exit_: LoopExit, ranks: tuple[int, ...], call: Call) -> str:
    """The fix of a loop exit a rank took alone: decide together on what it read."""
    from ddpdoctor.analysis.explain.cause import Cause, CauseKind, fix_for
    from ddpdoctor.analysis.explain.decisions import from_exit

    return fix_for(Cause(CauseKind.LOCAL_DECISION, tuple(ranks), call, from_exit(exit_)))


def explained(findings: list[Finding], job: JobView) -> list[Finding]:
    """The findings with the why: the first error finding told where its ranks went out
    of step (an extra or missing call before where it surfaced) or which iteration they
    skipped; findings that say this already are left as they are."""
    out = list(findings)
    first = next((i for i, f in enumerate(out) if f.severity == Severity.ERROR), None)
    if first is None:  # (an interrupted run's suspect: where the absent rank is held)
        from ddpdoctor.analysis.explain.cause import with_frame_decision

        return [with_frame_decision(f) if f.severity == Severity.WARNING else f for f in out]
    f = out[first]
    if "out_of_step" in f.evidence or "decision" in f.evidence or "loop" in f.evidence or \
            f.kind not in (
            FindingKind.MISSING_COLLECTIVE, FindingKind.UNEVEN_BATCHES,
            FindingKind.COLLECTIVE_MISMATCH, FindingKind.RANK_FAILED):
        return out
    skips = skipped_iterations(job)
    skip = next((s for s in skips if set(s.ranks) <= set(f.ranks)), None)
    if skip is not None:
        out[first] = with_skip(f, skip)
        return out
    group = f.evidence.get("group")
    if isinstance(group, str) and f.seq is not None:
        oos = find_step(job, group, f.seq)
        if oos is not None and min(oos.seqs.values()) < f.seq:
            surfaced = f"at seq {f.seq} ({f.summary})"
            out[first] = with_step(f, oos, surfaced, blame=not oos.probable)
            return out
    out[first] = with_exit(f, job)
    if out[first] is f:
        from ddpdoctor.analysis.explain.cause import with_frame_decision

        out[first] = with_frame_decision(f)
    return out


def _left_loop(f: Finding, job: JobView) -> tuple[tuple[int, ...], Call] | None:
    """(the culprits, all of which exited cleanly; the call a rank still waits in) when the
    finding blames ranks that left while others wait in a collective."""
    gone = tuple(r for r in f.ranks if r in job.ranks and job.ranks[r].exited_cleanly())
    if f.kind not in (FindingKind.MISSING_COLLECTIVE, FindingKind.UNEVEN_BATCHES) or \
            not gone or len(gone) != len(f.ranks):
        return None
    group = f.evidence.get("group")
    group = group if isinstance(group, str) else job.ranks[gone[0]].default_group()
    mine = job.ranks[gone[0]].last_call(group)
    for r in sorted(job.ranks):
        call = job.ranks[r].last_call(group) if r not in f.ranks else None
        if call is not None and call.callsite and (mine is None or call.seq > mine.seq):
            return gone, call
    return None


def _exit_around(job: JobView, awaited: Call,
                 loader_fed: bool) -> tuple[LoopExit, bool] | None:
    """The loop exit around the awaited call, at its line or at a line of the waiting
    rank's stack further out (the call sits in a helper the loop calls): a `break` or
    `return` (the culprits left the loop), else a `continue` on rank-local input in the
    innermost loop there (they skipped a step the others took; not when their loader's
    count says they ran out of batches), with True for the skip."""
    from ddpdoctor.analysis.load.frames import user_frames
    from ddpdoctor.analysis.explain.decisions import from_exit

    run = job.ranks.get(awaited.rank)
    sites = list(dict.fromkeys([awaited.callsite] + [site for site, _ in
                                                     (user_frames(run) if run else [])] +
                               (_raised_at(run) if run else [])))
    for site in sites:
        found = loop_exit(site, skipped=False)
        if found is not None:
            return found, False
    for site in sites if not loader_fed else ():  # (a loader's count says it ran out)
        found = loop_exit(site, skipped=True, innermost=True)
        decided = from_exit(found) if found is not None else None
        if found is not None and decided is not None and decided.reads.rank_local:
            return found, True
    return None


def _raised_at(run: Any) -> list[str]:
    """The user's ``path:line`` frames of the rank's uncaught exception, innermost first."""
    from ddpdoctor.analysis.load.frames import INTERNAL_PARTS
    from ddpdoctor.trace.meta_line import traceback_frames

    exc = run.exception()
    frames = traceback_frames(exc) if exc else []
    return [f"{f.get('filename')}:{f.get('line')}" for f in reversed(frames)
            if f.get("filename") and not any(p in str(f["filename"]) for p in INTERNAL_PARTS)
            and not declares_launcher(str(f["filename"]))]


def with_exit(f: Finding, job: JobView) -> Finding:
    """Ranks that left the training loop alone (clean exit while the others wait in the
    loop's next collective): the `break` or `return` that ended their loop, or the
    `continue` by which they skipped a step, the condition and what it reads, and the fix
    that makes the ranks decide together."""
    left = _left_loop(f, job)
    if left is None:
        return f
    ranks, awaited = left
    around = _exit_around(job, awaited, "batches" in f.evidence)
    if around is None:
        return f
    exit_, skipped = around
    steps = sum(1 for cs in job.ranks[ranks[0]].calls.values() for c in cs
                if c.origin == Origin.DDP_BACKWARD and c.aux == 0)
    after = f" after {steps} backward passes" if steps else ""
    who = ranks_text(ranks)
    alone = "alone" if len(ranks) == 1 else "without the others"
    did = (f"skipped a step the others took{after}" if skipped else
           f"left the loop {alone}{after}")
    lead = (f"{who} {did}: `{exit_.source}` at "
            f"{_short(exit_.callsite)}" + (f" under {exit_.condition}" if exit_.condition
                                             else "") +
            f", decided by {exit_.decided_by}, while the others went on to "
            f"{awaited.describe()} at {awaited.short_site}")
    evidence = {"rank": list(ranks), "statement": exit_.statement,
                "callsite": exit_.callsite, "source": exit_.source,
                "condition": exit_.condition, "decided_by": exit_.decided_by,
                "awaited": awaited.callsite}
    return replace(f, summary=f"{lead}; {f.summary}", detail=f"{lead}.\n{f.detail}",
                   fix=_decided_fix(exit_, ranks, awaited),
                   evidence={**f.evidence, "loop_exit": evidence})
