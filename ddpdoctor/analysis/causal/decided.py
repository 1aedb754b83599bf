"""Blame from what each rank decided: where the ranks' recorded paths parted, the decision
behind it decides a root finding's culprits, and the finding says it.

The culprits, in this order of the facts that tell them:
1. majority: the ranks whose outcome at the decision differs from most ranks';
2. history: the side that went, at the site where the paths parted, a way it had not gone
   in its own earlier segments, while the others went their usual way;
3. branch: the side that entered a branch whose body holds the collective it waits in (the
   others never make it);
4. otherwise every side (``evidence.no_majority``): no coin toss.
A rank that the others wait on while it keeps working outside any collective (it computes,
polls, retries) stays the culprit: it is the least progressed; its record tells where it
loops and what its condition reads.  A finding whose ranks recorded no control flow
(Python < 3.12) is left as the source-based rules told it."""

from __future__ import annotations

from dataclasses import replace

from ddpdoctor.analysis.align.paths import (Parting, earlier_turns, earlier_ways, flows_of,
                                           partings)
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.explain import decision_text as T
from ddpdoctor.analysis.explain.loops import current_loop, skipped_source
from ddpdoctor.analysis.explain.recorded import RecordedDecision, body_span, recorded_decision
from ddpdoctor.analysis.load.frames import INTERNAL_PARTS, user_frames
from ddpdoctor.analysis.load.user_source import source_line, split_callsite
from ddpdoctor.analysis.model import Finding, FindingKind, JobView, Severity
from ddpdoctor.trace.meta_line import traceback_frames

DECIDED = (FindingKind.COLLECTIVE_MISMATCH, FindingKind.MISSING_COLLECTIVE,
           FindingKind.UNEVEN_BATCHES, FindingKind.DEADLOCK)
MAX_RANKS = 1024  # beyond, the fast scan's jobs: the decision is not read
MAX_TURNS = 6  # places the paths parted that are weighed, first first
WORKING = (StateKind.COMPUTING, StateKind.DATA_LOADING, StateKind.OS_BLOCKED,
           StateKind.NOT_ARRIVED, StateKind.UNSEEN)


def _involved(job: JobView, f: Finding) -> list[int]:
    group = f.evidence.get("group")
    if isinstance(group, str):
        return job.group_members(group)
    return sorted(job.ranks)


def _majority(d: RecordedDecision) -> tuple[int, ...] | None:
    sides = list(d.sides().values())
    if len(sides) < 2 or len(sides[0]) * 2 <= sum(map(len, sides)):
        return None
    return tuple(sorted(r for side in sides[1:] for r in side))


def _history(job: JobView, p: Parting, d: RecordedDecision) -> tuple[int, ...] | None:
    """The side that went a new way at the parting site while the others kept theirs."""
    if d.parted_at is not None:
        return None  # decided earlier, once: no history at that line
    flows = flows_of(job, list(p.ways))
    new, usual = set(), set()
    for r, w in p.ways.items():
        before = earlier_ways(flows[r], r, p.key, w.segment.number)
        if not before:
            return None
        went = {i for i, n in enumerate(w.counts) if n}
        had = {i for e in before for i, n in enumerate(e.counts) if n}
        (usual if went <= had else new).add(r)
    if not new or not usual:
        return None
    sides = d.sides().values()
    return tuple(sorted(new)) if any(set(s) == new for s in sides) else None


def _holds_call(job: JobView, p: Parting, states: dict[int, RankState],
                rank: int) -> bool:
    """Does the rank's collective (its open call, or a frame of its stack) sit in the body
    of the statement where the paths parted?"""
    span = body_span(p.site)
    run = job.ranks.get(rank)
    if span is None or run is None:
        return False
    s = states.get(rank)
    sites = [s.call.callsite] if s is not None and s.call is not None else []
    sites += [site for site, _ in user_frames(run)]
    exc = run.exception()  # a rank that died in the call (its peer's exit closed it)
    sites += [f"{f.get('filename')}:{f.get('line')}" for f in
              (traceback_frames(exc) if exc else [])]
    for site in sites:
        path, line = split_callsite(site)
        if path.rsplit("/", 1)[-1] == p.site.key[0] and span[0] <= line <= span[1]:
            return True
    return False


def _branch(job: JobView, p: Parting, d: RecordedDecision,
            states: dict[int, RankState]) -> tuple[int, ...] | None:
    """The side that entered the branch holding the collective it is in."""
    if p.site.loop or d.parted_at is not None:
        return None
    inside = {r for r, o in d.ranks.items() if o.outcome not in ("false", "not reached")
              and _holds_call(job, p, states, r)}
    sides = d.sides().values()
    return tuple(sorted(inside)) if inside and any(set(s) == inside for s in sides) else None


def blame(job: JobView, p: Parting, d: RecordedDecision,
          states: dict[int, RankState]) -> tuple[tuple[int, ...], str]:
    """(the culprits, the rule that told them): see the module doc."""
    for rule, found in (("majority", _majority(d)), ("history", _history(job, p, d)),
                        ("branch", _branch(job, p, d, states))):
        if found:
            return found, rule
    return tuple(sorted(d.ranks)), "no_majority"


def _collective(f: Finding, culprits: tuple[int, ...], states: dict[int, RankState]) -> str:
    for r in culprits:
        s = states.get(r)
        if s is not None and s.call is not None:
            return f"{s.call.describe()} at {s.call.short_site}"
    return ""


def told(f: Finding, d: RecordedDecision, culprits: tuple[int, ...], rule: str,
         collective: str) -> Finding:
    """``f`` with the decision's culprits, its lead, mechanism and fix."""
    why = T.why(d, culprits, rule)
    evidence = {**f.evidence, "decision": d.to_dict(),
                "why": {"kind": "recorded_decision", "rule": rule, "ranks": list(culprits),
                        "text": why}}
    if rule == "no_majority":
        evidence["no_majority"] = True
    return replace(f, ranks=culprits, summary=f"{T.lead(d)}; {f.summary}",
                   detail=f"{why}\n{f.detail}", fix=T.fix(d, rule, collective),
                   evidence=evidence)


def _working(f: Finding, states: dict[int, RankState]) -> bool:
    """Are the finding's culprits ranks working outside any collective (the ones waited on)?"""
    return bool(f.ranks) and all(r in states and states[r].kind in WORKING for r in f.ranks)


def _held_child(run: object) -> tuple[int, str, int, str] | None:
    """(pid, file, line, function) of the innermost user frame of the first child process
    (a DataLoader worker) whose stack has one: where a rank's loader waits."""
    for pid, frames in getattr(run, "children", []):
        for frame in frames:
            name = str(frame.get("filename") or "")
            if name and not any(part in name for part in INTERNAL_PARTS) and \
                    type(frame.get("line")) is int:
                return pid, name, frame["line"], str(frame.get("name") or "")
    return None


def with_worker(f: Finding, job: JobView) -> Finding:
    """A working culprit that waits on its own child process (a DataLoader worker stuck in
    one call): the worker's line, from its stack."""
    for r in f.ranks:
        held = _held_child(job.ranks.get(r))
        if held is None:
            continue
        pid, file, line, function = held
        source = source_line(f"{file}:{line}")
        text = (f"rank {r} waits on its child process {pid} (a DataLoader worker), held at "
                f"{file.rsplit('/', 1)[-1]}:{line}" + (f" `{source}`" if source else "") +
                (f" in {function}" if function else ""))
        return replace(f, summary=f"{f.summary}; {text}", detail=f"{f.detail}\n{text}.",
                       evidence={**f.evidence, "worker": {
                           "rank": r, "pid": pid, "file": file, "line": line,
                           "source": source, "function": function}})
    return f


def with_loop(f: Finding, job: JobView, states: dict[int, RankState]) -> Finding:
    """A working culprit's loop, from its record: where it turns and what it reads."""
    loops = {}
    for r in f.ranks:
        run = job.ranks.get(r)
        frames = user_frames(run) if run is not None else []
        line = split_callsite(frames[0][0])[1] if frames else None
        found = current_loop(job, r, line)
        if found is not None:
            loops[r] = found
    if not loops:
        return f
    text = "; ".join(lp.text(r) for r, lp in sorted(loops.items()))
    return replace(f, summary=f"{f.summary}; {text}", detail=f"{f.detail}\n{text}.",
                   fix=T.loop_fix(loops, job.bound),
                   evidence={**f.evidence, "loop": {str(r): lp.to_dict()
                                                    for r, lp in sorted(loops.items())}})


def _modules(params: list[str]) -> set[str]:
    """The module attributes a parameter path names (``box_head.weight`` -> box_head)."""
    return {part for name in params for part in str(name).split(".")[:-1]
            if part and not part.isdigit() and part != "module"}


def _own_turn(f: Finding, job: JobView, states: dict[int, RankState]) -> Finding:
    """A rank DDP's reducer failed on (a parameter got no gradient): the turn its record
    shows it took alone before, whose skipped code uses that parameter's module (an early
    return on an empty batch), told; it stays the culprit (it failed), the turn says
    where."""
    modules = _modules(list(f.evidence.get("parameters") or []))
    for p in partings(job, _involved(job, f)):
        d = recorded_decision(job, p)
        culprits, rule = blame(job, p, d, states)
        if set(culprits) != set(f.ranks):
            continue
        skipped = skipped_source(d, culprits[0])
        if modules and not any(m in skipped for m in modules):
            continue  # a turn of its own, but not the one that left the module unused
        return told(f, d, culprits, rule, "")
    return f


def with_recorded_decisions(findings: list[Finding], job: JobView,
                            states: dict[int, RankState]) -> list[Finding]:
    """The root errors of ``findings`` decided from the ranks' recorded decisions, where
    they recorded their control flow and their paths parted."""
    if len(job.ranks) > MAX_RANKS or job.big:
        return findings
    out = list(findings)
    for i, f in enumerate(out):
        if f.severity != Severity.ERROR or f.caused_by is not None or "p2p" in f.evidence:
            continue
        if f.kind == FindingKind.RANK_FAILED and "parameters" in f.evidence:
            out[i] = _own_turn(f, job, states)  # DDP's reducer: a gradient never came
            continue
        if f.kind not in DECIDED:
            continue
        if _working(f, states):
            out[i] = with_worker(with_loop(f, job, states), job)
            continue
        chosen = _relevant(job, f, states)
        if chosen is not None:
            d, culprits, rule = chosen
            out[i] = told(f, d, culprits, rule, _collective(f, culprits, states))
    return out


def _call_lines(job: JobView, ranks: list[int]) -> set[str]:
    """The source lines the ranks' collectives were called from (each distinct site once)."""
    sites = {c.callsite for r in ranks if r in job.ranks
             for calls in job.ranks[r].calls.values() for c in calls[-64:]}
    return {line for site in sites if (line := source_line(site))}


def _turn_behind(job: JobView, ranks: list[int], states: dict[int, RankState]
                 ) -> tuple[RecordedDecision, tuple[int, ...], str] | None:
    """The earlier turn the ranks took differently (not a loop's own test) that a majority
    or a rank's own history tells, and whose skipped code holds a collective (a `continue`
    that jumps over the backward): the cause of a loop that ended apart; else the newest
    such turn, else None."""
    lines = _call_lines(job, ranks)
    told = None
    for p in earlier_turns(job, ranks):
        d = recorded_decision(job, p)
        culprits, rule = blame(job, p, d, states)
        if rule not in ("majority", "history"):
            continue
        skipped = "\n".join(skipped_source(d, r) for r in culprits)
        if any(line in skipped for line in lines):
            return d, culprits, rule
        told = told or (d, culprits, rule)
    return told


def _relevant(job: JobView, f: Finding, states: dict[int, RankState]
              ) -> tuple[RecordedDecision, tuple[int, ...], str] | None:
    """The first place the paths parted that leads to the finding: the culprits' branch
    holds their call, a value it set drove the loop where the collectives parted, or the
    code the culprits' way skipped holds the call the others wait in; else the first."""
    first = None
    ranks = _involved(job, f)
    for p in partings(job, ranks)[:MAX_TURNS]:
        d = recorded_decision(job, p)
        culprits, rule = blame(job, p, d, states)
        if first is None and p.site.loop and d.parted_at is None:
            first = _turn_behind(job, ranks, states)  # why one rank's loop ended apart
        first = first or (d, culprits, rule)
        if rule == "branch" or d.parted_at is not None:
            return d, culprits, rule
        awaited = {source_line(s.call.callsite) for r, s in states.items()
                   if r not in culprits and s.call is not None and s.call.open}
        skipped = "\n".join(skipped_source(d, r) for r in culprits)
        if any(a and a in skipped for a in awaited):
            return d, culprits, rule
    return first
