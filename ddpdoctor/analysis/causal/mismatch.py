"""collective_mismatch: the finding for ranks that called differing collectives at one seq."""

from __future__ import annotations

import os
from dataclasses import replace

from ddpdoctor.analysis.explain import why
from ddpdoctor.analysis.explain.cause import CauseKind, decision_of, mismatch_cause, with_cause
from ddpdoctor.analysis.causal.pattern import breaks_pattern, pattern_culprits, stream_until
from ddpdoctor.analysis.align.out_of_step import OutOfStep
from ddpdoctor.analysis.align.matcher import Divergence, find_divergence
from ddpdoctor.analysis.model import (FindingKind, Call, Finding, JobView, Severity, rank_groups,
                                      ranks_text)
from ddpdoctor.analysis.load.frames import user_frames
from ddpdoctor.analysis.load.user_source import keyed_loop, rank_condition, source_line, split_callsite


def call_condition(call: Call, job: JobView | None) -> tuple[str, str] | None:
    """(site, test): the rank-dependent ``if`` enclosing the call, at its own line; else,
    for the call the rank is blocked in now, at a line of the user's code further out on
    its captured stack (a helper whose collective is called under ``if rank == 0``); else
    a line of those that lint flagged before the run as reaching a collective on some
    ranks only (a flag set from the rank, tested in another method)."""
    sites = [call.callsite]
    run = job.ranks.get(call.rank) if job is not None else None
    if run is not None and call.open and run.open_call() is call:
        sites += [site for site, _ in user_frames(run)]
    sites = list(dict.fromkeys(sites))
    for site in sites:
        cond = rank_condition(site)
        if cond:
            return site, cond
    lint = job.lint_sites if job is not None else {}
    for site in dict.fromkeys(sites):
        path, line = split_callsite(site)
        kind = lint.get((os.path.basename(path), line))
        if kind:
            return site, f"a path lint flagged before the run ({kind})"
    return None


def _tie_break(div: Divergence, job: JobView | None,
               here: OutOfStep | None) -> tuple[int, ...]:
    """With no majority, blame the ranks whose call sits under a rank-dependent branch
    when the others' do not (the evidence in the source); else the ranks whose call a
    decision on rank-local input put there (a branch on a metric or a clock, the no_sync()
    choice, the loop exit by which they left the loop the others are in); else the ranks
    the alignment says skipped (or added) a call at this seq (``here``); else the ranks
    whose call breaks their own repeating pattern of earlier calls (or, failing that,
    whose call has no precedent while the others repeat theirs); else every rank."""
    conditional = {r for r, c in div.calls.items() if call_condition(c, job)}
    if conditional and len(conditional) < len(div.calls):
        return tuple(sorted(conditional))
    decided = {r for r, c in div.calls.items()
               if decision_of(c, [o for q, o in div.calls.items() if q != r])}
    if decided and len(decided) < len(div.calls):
        return tuple(sorted(decided))
    if here is not None and set(here.culprits) < set(div.calls):
        return tuple(sorted(here.culprits))  # the alignment: they skipped or added a call
    if job is not None:
        verdicts = {r: breaks_pattern(stream_until(job.ranks[r], c, div.group))
                    for r, c in div.calls.items() if r in job.ranks}
        blamed = pattern_culprits(verdicts)
        if blamed and len(verdicts) == len(div.calls):
            return blamed
    return div.culprits


def _step_here(div: Divergence, job: JobView | None) -> OutOfStep | None:
    """Where the alignment says the ranks went out of step, when that is this very seq and
    more than a call-site difference tells it."""
    oos = why.find_step(job, div.group, div.seq) if job is not None else None
    if oos is None or oos.probable or min(oos.seqs.values()) != div.seq:
        return None
    return oos


def _line(call: Call, job: JobView | None) -> str:
    """What a rank called, where, the source line and the rank-dependent condition around
    it (the rank is left to the caller: ranks that did the same share one line)."""
    found = call_condition(call, job)
    src = source_line(call.callsite)
    text = f"{call.describe()} at {call.short_site}"
    if src:
        text += f"  `{src}`"
    if found is not None:
        site, cond = found
        path, line = split_callsite(site)
        outer = f" at {os.path.basename(path)}:{line}" if site != call.callsite else ""
        text += f"  (inside {cond}{outer})"
    return text


def finding_for(div: Divergence, job: JobView | None = None) -> Finding:
    """The collective_mismatch finding of a divergence (``job`` lets a tie be broken by
    each rank's own history)."""
    here = _step_here(div, job)
    culprits = _tie_break(div, job, here) if not div.majority else div.culprits
    calls = div.calls
    others = [r for r in calls if r not in culprits]
    bad = calls[culprits[0]]
    if others:
        ref = calls[others[0]]
        summary = (f"{ranks_text(culprits)} called {bad.describe()} at {bad.short_site} "
                   f"where {ranks_text(others)} called {ref.describe()} at {ref.short_site} "
                   f"(seq {div.seq}, {div.state.value} differs)")
    else:
        summary = (f"{ranks_text(culprits)} diverged at seq {div.seq}: "
                   + "; ".join(f"{ranks_text(rs)} {what}" for rs, what in rank_groups(
                       {r: f"{c.describe()} at {c.short_site}" for r, c in calls.items()}))
                   + " (no majority, and neither the source nor the ranks' own histories "
                   "single one out)")
    detail = (f"Collective #{div.seq} on process group {div.group} does not match across "
              f"ranks ({div.state.value} differs):\n"
              + "\n".join(f"  {ranks_text(rs, count=True)}: {line}" for rs, line in
                          rank_groups({r: _line(c, job) for r, c in calls.items()})))
    if div.majority:
        detail += (f"\n{ranks_text(div.majority).capitalize()} agree; the odd one"
                   f"{'s' if len(culprits) > 1 else ''} out: {ranks_text(culprits)}.")
    evidence = {
        "group": div.group, "differs": div.state.value,
        "calls": {str(r): {"op": c.op, "shapes": [list(s) for s in c.in_shapes],
                           "dtypes": list(c.dtypes), "reduce_op": c.reduce_op or None,
                           "root": c.peer if c.peer >= 0 else None, "callsite": c.callsite,
                           "condition": (call_condition(c, job) or (None, None))[1],
                           "origin": c.origin.value, "entered_at": c.t_start / 1e9}
                  for r, c in calls.items()},
    }
    missed = here.call if here is not None and not here.extra and \
        set(here.culprits) == set(culprits) else None
    cause = mismatch_cause(tuple(culprits), calls, div.state.value, missed)
    loop = _keyed_loop(calls)
    if cause.kind in (CauseKind.SHAPE, CauseKind.DTYPE, CauseKind.ORDER) and loop:
        cause = replace(cause, kind=CauseKind.SWAPPED)
        detail += (f"\nEvery rank makes this call inside {loop}, once per key, in the order "
                   "that rank added its keys (or listed them): the same calls, in another "
                   "order on some ranks.")
    told = [why.mechanism(c) for c in calls.values() if c.origin.implicit]
    if told:
        detail += "\n" + "\n".join(dict.fromkeys(told))
    found = with_cause(Finding(FindingKind.COLLECTIVE_MISMATCH, Severity.ERROR, tuple(culprits),
                               div.seq, summary, detail, "", evidence), cause, job)
    return _out_of_step(found, div, job, bool(div.majority))


def _keyed_loop(calls: dict[int, Call]) -> str | None:
    """The loop over keys every rank makes this call in, when they all call it from one line."""
    sites = {c.callsite for c in calls.values()}
    return keyed_loop(next(iter(sites))) if len(sites) == 1 else None


def _out_of_step(f: Finding, div: Divergence, job: JobView | None,
                 majority: bool) -> Finding:
    """The finding told where the ranks went out of step when that was before the seq
    where the calls differ; its culprits are then the ranks that made the extra (or missed
    the) call, unless the evidence is only a call-site difference."""
    if job is None:
        return f
    oos = why.find_step(job, div.group, div.seq)
    if oos is None or min(oos.seqs.values()) >= div.seq:
        return f
    surfaced = f"at seq {div.seq}, where the calls differ: " + "; ".join(
        f"rank {r} {c.describe()} at {c.short_site}" for r, c in list(div.calls.items())[:4])
    return why.with_step(f, oos, surfaced, blame=not oos.probable or not majority)


def divergences(job: JobView) -> list[Divergence]:
    if job.big:  # too many records to hold as objects: the vectorized scan of every trace
        from ddpdoctor.analysis.align.fast_scan import find_divergences_fast

        return find_divergences_fast(job.run_dirs)
    found = []
    for group in job.groups():
        by_rank = {r: run.calls[group] for r, run in job.ranks.items() if group in run.calls}
        div = find_divergence(by_rank, group)
        if div is not None:
            found.append(div)
    return found


