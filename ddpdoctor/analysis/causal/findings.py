"""The findings of root causes and of their consequences, from rank states and waits."""

from __future__ import annotations

from dataclasses import replace

from ddpdoctor.analysis.causal.graph import Wait
from ddpdoctor.analysis.causal.known_failures import KnownFailure
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.align.clocks import host_now, ordered
from ddpdoctor.analysis.model import (FindingKind, Finding, JobView, NodeFacts, Severity,
                                      ranks_text, ranks_values)
from ddpdoctor.analysis.causal.rank_words import (after_call, utc_clock, wait_text, waits_text,
                                                 whereabouts)
from ddpdoctor.analysis.load.user_source import rank_condition
from ddpdoctor.trace import layout as L

ORDER_FIX = ("Make every rank call the same collectives in the same order: a collective "
             "inside a rank-dependent branch must have a matching call on every other rank.")
TEARDOWN_FIX = ("Call dist.barrier() before dist.destroy_process_group() and leave no "
                "collective work in flight (wait on every async handle) before the process "
                "exits.")
TEARDOWN_AFTER_BARRIER_FIX = (
    "Nothing in the collectives to fix: every one matched and the rank had passed its last "
    "barrier.  With gloo, torch can abort a process at interpreter exit while gloo's worker "
    "threads free finished work that still holds Python objects (a torch teardown issue; "
    "see pytorch/pytorch pull request 179291).  Check that what the script does after that "
    "barrier (saving, logging) is there.")
UNEVEN_FIX = ("Give every rank the same number of steps: split the data evenly (pad or "
              "drop the remainder), or stop all ranks together (all_reduce a 'done' flag, "
              "or torch's Join context manager).")



def absent_rank(job: JobView, target: RankState, waits: list[Wait],
                states: dict[int, RankState]) -> Finding:
    """A rank others wait for is elsewhere (computing, loading data, exited, stopped, not
    arrived): the finding names that rank and where it is."""
    first = ordered(job, waits, lambda w: w.rank, lambda w: states[w.rank].since_ns,
                    lambda w: w.seq)[0]
    call = states[first.rank].call
    cond = rank_condition(call.callsite) if call is not None else None
    waiting = sorted(w.rank for w in waits)
    summary = f"{wait_text(first, call)}; rank {target.rank} {whereabouts(target)}"
    lines = waits_text(waits, states)
    lines.append(f"Rank {target.rank} {whereabouts(target)}.")
    if target.call is not None and target.kind != StateKind.EXITED:
        lines.append(f"Rank {target.rank}'s last collective: {target.call.describe()} "
                     f"(seq {target.call.seq} on group {target.call.group}) at "
                     f"{target.call.short_site}.")
    since = states[first.rank].since_ns
    if since and job.dumps_alone:  # no clock of the job: when its files were written is
        lines.append(f"Waiting since {utc_clock(since)} by rank {first.rank}'s flight "
                     "recorder (a dump does not say when it was taken).")  # not that
    elif since:
        lines.append(f"Waiting for {(host_now(job, first.rank) - since) / 1e9:.1f} s.")
    if cond:
        lines.append(f"The awaited call is inside {cond}: it runs on some ranks only.")
    if target.kind == StateKind.OS_BLOCKED and target.blocked_by in waiting:
        fix = (f"Rank {target.blocked_by} holds the lock rank {target.rank} waits for, while "
               f"it waits in a collective for rank {target.rank}: release the lock before the "
               "collective (or enter the collective on every rank before taking the lock).")
    elif cond:
        fix = ("Every rank must reach the same collectives: move the collective out of the "
               "rank-dependent branch or call it on every rank.")
    elif target.kind == StateKind.NOT_ARRIVED:
        fix = (f"Find what keeps rank {target.rank} from init_process_group (its stack): a "
               "download, a file lock, a barrier of its own; give such work a timeout or do "
               "it on one rank after init and share the result.")
    elif target.kind == StateKind.OS_BLOCKED:
        fix = (f"Rank {target.rank} waits on {target.blocked_meaning or target.blocked_on} "
               "outside any collective while the others wait for it: find who holds it (the "
               "lock's owner, the pipe's or socket's other end), give the wait a timeout, or "
               "do that work on every rank (or on one rank before a collective everyone "
               "enters).")
    elif target.kind == StateKind.UNSEEN and target.call is None:
        fix = (f"Add rank {target.rank}'s dump (the same directory, named with its rank) to "
               "see how far it came, or look at its stack (py-spy dump --pid PID, or "
               "`ddpdoctor attach` while it hangs).")
    elif target.kind == StateKind.UNSEEN:
        fix = (f"The dumps show where rank {target.rank} stopped issuing collectives, not "
               f"why: look at its stack (py-spy dump --pid PID, or `ddpdoctor attach` while it "
               "hangs) or run the job under `ddpdoctor run`, which records it.")
    elif target.kind == StateKind.COMPUTING:
        fix = (f"Rank {target.rank} is doing work the others are not waiting for: balance it "
               "(evaluate on every rank or on none), or raise the process group's timeout "
               "for long one-rank phases.")
    else:
        fix = ("Every rank must reach the same collectives: check why the absent rank took "
               "another path (see its stack): an early exit, a different number of batches, "
               "or a rank-dependent branch.")
    culprits = (target.blocked_by,) if target.blocked_by in waiting else \
        tuple(waiting) if cond else (target.rank,)
    evidence = {"group": first.group, "waiting": {str(w.rank): w.op for w in waits},
                "absent": {str(target.rank): whereabouts(target)}, "state": target.kind.value,
                "frame": target.frame, "condition": cond}
    return Finding(FindingKind.MISSING_COLLECTIVE, Severity.ERROR, culprits, first.seq, summary,
                   "\n".join(lines), fix, evidence)


def _steps_reached(s: RankState) -> int:
    """Optimizer steps taken, counting the step in progress when the rank waits in a DDP
    gradient bucket (it is inside a step's backward)."""
    inside = s.call is not None and bool(s.call.flags & L.RecordFlag.BUCKET)
    return s.steps + (1 if inside else 0)


def _loader_fed(job: JobView, rank: int) -> bool:
    """Did the rank draw its batches from a recorded DataLoader?  Then its batch counts are
    known (uneven.py compares them) and the step counter says nothing more."""
    from ddpdoctor.analysis.align.epochs import epochs_of

    run = job.ranks.get(rank)
    return run is not None and bool(epochs_of(run))


def exited_early(target: RankState, waits: list[Wait], states: dict[int, RankState],
                 job: JobView) -> Finding:
    """A clean exit while peers wait for more: uneven steps when the step counts differ,
    else a rank that exited early."""
    waiting_steps = {w.rank: _steps_reached(states[w.rank]) for w in waits}
    if waiting_steps and max(waiting_steps.values()) > target.steps and \
            not _loader_fed(job, target.rank):
        most = max(waiting_steps.values())
        summary = (f"rank {target.rank} ran {target.steps} steps and exited while "
                   f"{ranks_text(sorted(waiting_steps))} went on to step {most}"
                   f" (steps: {ranks_values({target.rank: target.steps, **waiting_steps})})")
        detail = "\n".join(waits_text(waits, states) +
                           [f"Rank {target.rank} {whereabouts(target)}."])
        return Finding(FindingKind.UNEVEN_BATCHES, Severity.ERROR, (target.rank,),
                       waits[0].seq, summary, detail, UNEVEN_FIX,
                       {"group": waits[0].group, "steps": {str(target.rank): target.steps,
                        **{str(r): n for r, n in waiting_steps.items()}}})
    finding = absent_rank(job, target, waits, states)
    return replace(finding, fix="Rank %d returned while the others still call collectives: "
                   "make every rank run the same collectives before it exits (see its last "
                   "call site)." % target.rank)


def exited_together(a: Finding, b: Finding) -> Finding:
    """Two uneven_batches findings of ranks that ran as many steps and left while the same
    ranks waited: one, naming them all."""
    ranks = tuple(sorted({*a.ranks, *b.ranks}))
    steps = {**b.evidence["steps"], **a.evidence["steps"]}
    mine = steps[str(ranks[0])]
    waiting = {int(r): n for r, n in steps.items() if int(r) not in ranks}
    summary = (f"{ranks_text(ranks)} ran {mine} steps and exited while "
               f"{ranks_text(sorted(waiting))} went on to step {max(waiting.values())} "
               f"(steps: {ranks_values({int(k): v for k, v in steps.items()})})")
    extra = [line for line in b.detail.splitlines() if line not in a.detail.splitlines()]
    return replace(a, ranks=ranks, summary=summary,
                   detail="\n".join([a.detail, *extra]),
                   evidence={**a.evidence, "steps": steps})


def died(s: RankState, waits: list[Wait], job: JobView,
         ranks: tuple[int, ...] = ()) -> Finding:
    """rank_failed: a rank died of its own (exception or signal), with its last words;
    ``ranks``: every rank that failed the same way at about the same time."""
    ranks = ranks or (s.rank,)
    d = s.death
    assert d is not None
    where = f" at {d.where}" if d.where else ""
    during = f" while inside {s.call.describe()} (seq {s.call.seq})" if s.call else \
        (f" at step {s.steps}" if s.steps else "")
    detail = d.detail + (f"\nIt was{during}." if during else "")
    if waits:
        waits = list(dict.fromkeys(waits))  # (one wait on two ranks that failed alike: once)
        detail += "\n" + "\n".join(f"{line}." for line in waits_text(waits))
    fix = "Fix the error on the failing rank (see its traceback)."
    if d.signal == "SIGKILL" and "vanished" in d.cause:
        fix = ("Find who killed the rank: check `dmesg` for the OOM killer and the "
               "scheduler's logs; reduce memory per rank if it is the OOM killer.")
    elif d.signal:
        fix = (f"A {d.signal} leaves no Python traceback: look at the faulthandler dump and "
               "the rank's last call above.")
    evidence = {"cause": d.cause, "signal": d.signal, "at_ns": d.at_ns,
                "pid": job.ranks[s.rank].pid if s.rank in job.ranks else None,
                "waiting": [w.rank for w in waits]}
    found = Finding(FindingKind.RANK_FAILED, Severity.ERROR, tuple(sorted(ranks)),
                    s.call.seq if s.call else None,
                    f"{ranks_text(ranks)} failed{where}: {d.cause}", detail, fix, evidence)
    from ddpdoctor.analysis.causal.ddp_errors import reducer_error, reducer_finding

    reducer = [e for r in ranks if r in job.ranks and (e := reducer_error(job.ranks[r]))]
    return reducer_finding(reducer, found, job, d.where) if reducer else found


def teardown(s: RankState, finished: bool) -> Finding:
    """A rank aborted in teardown after every collective completed and matched."""
    d = s.death
    assert d is not None
    last = f"after its last collective {s.call.describe()} (seq {s.call.seq}) completed" \
        if s.call else "after its collectives completed"
    summary = f"rank {s.rank} aborted in teardown ({d.cause}) {last}"
    detail = (f"Rank {s.rank} died in destroy_process_group or at interpreter exit {last}; "
              "every collective it made had matched on all ranks, so the training itself "
              "was not affected.\n" + d.detail)
    fix = TEARDOWN_AFTER_BARRIER_FIX if d.last_op == "barrier" else TEARDOWN_FIX
    return Finding(FindingKind.RANK_FAILED, Severity.WARNING if finished else Severity.ERROR,
                   (s.rank,), None, summary, detail, fix,
                   {"cause": d.cause, "signal": d.signal, "teardown": True})


def deadlock(cycle: tuple[int, ...], waits: dict[int, Wait],
             states: dict[int, RankState]) -> Finding:
    """Ranks that wait on each other in a cycle: one finding naming every rank and group."""
    groups = sorted({waits[r].group for r in cycle})
    lines = [wait_text(waits[r], states[r].call) for r in cycle]
    p2p = all(states[r].call is not None and states[r].call.op in  # type: ignore[union-attr]
              ("send", "recv", "isend", "irecv") for r in cycle)
    summary = (f"deadlock: {ranks_text(cycle)} wait on each other in a cycle (" +
               "; ".join(lines) + ")")
    fix = ("Post sends and receives in a matching order (one side sends first), or use "
           "dist.batch_isend_irecv / isend+irecv." if p2p else
           "Enter the process groups in the same order on every rank: "
           + ", ".join(f"group {g}" for g in groups) + " are taken in different orders."
           if len(groups) > 1 else
           "The ranks wait on each other's calls on one group: make every rank make the same "
           "calls in the same order (a send matched by a recv on its peer, a collective "
           "reached by every rank of the group).")
    return Finding(FindingKind.DEADLOCK, Severity.ERROR, tuple(cycle), None, summary,
                   "\n".join(lines), fix, {"groups": groups, "cycle": list(cycle)})


def skipped(breakers: list[int], cycle: tuple[int, ...], waits: dict[int, Wait],
            states: dict[int, RankState]) -> Finding:
    """A cycle where some ranks broke their own repeating pattern (skipped a collective
    they made every earlier step): those ranks are the cause."""
    lines = [wait_text(waits[r], states[r].call) for r in cycle]
    victims = [r for r in cycle if r not in breakers]
    b = states[breakers[0]].call
    v = states[victims[0]].call if victims else None
    summary = (f"{ranks_text(breakers)} skipped "
               + (f"{v.describe()} at {v.short_site} on group {v.group}" if v else
                  "a collective")
               + " that it made every earlier step, and went on to "
               + (f"{b.describe()} at {b.short_site}" if b else "another call")
               + f"; {ranks_text(victims)} wait{'s' if len(victims) == 1 else ''} for it")
    fix = ("Call the collective on every rank of its group every step, even with nothing "
           "to contribute (reduce a zero tensor), or move the condition out of the loop so "
           "all ranks take the same branch.")
    return Finding(FindingKind.MISSING_COLLECTIVE, Severity.ERROR, tuple(sorted(breakers)),
                   waits[breakers[0]].seq, summary, "\n".join(lines), ORDER_FIX + " " + fix,
                   {"cycle": list(cycle), "groups": sorted({waits[r].group for r in cycle})})


def died_leaving(root: Finding, s: RankState) -> Finding:
    """A root that names a rank which left early, told how that rank then died."""
    d = s.death
    assert d is not None
    then = (f"Rank {s.rank} then died on its way out (destroy_process_group or interpreter "
            f"exit): {d.cause}; a consequence of leaving while its peers still called "
            "collectives, not a separate bug.")
    return replace(root, detail=f"{root.detail}\n{then}", evidence={
        **root.evidence, "died_leaving": {str(s.rank): d.cause}})


def with_consequences(root: Finding, ranks: list[int], states: dict[int, RankState]) -> Finding:
    """A rank_failed root that also says which ranks then failed waiting for it."""
    then = "; ".join(f"rank {r} {states[r].death.cause}" for r in ranks)  # type: ignore
    return replace(root, detail=f"{root.detail}\nThen: {then} (consequences of this failure).",
                   evidence={**root.evidence, "consequences": {
                       str(r): states[r].death.cause for r in ranks}})  # type: ignore


def consequence(ranks: list[int], states: dict[int, RankState], root: Finding,
                root_index: int) -> Finding:
    """rank_failed at info level: errors raised on ranks that waited for a root cause."""
    causes = "; ".join(f"rank {r}: {states[r].death.cause}"  # type: ignore[union-attr]
                       for r in ranks[:8])
    summary = (f"{ranks_text(ranks)} failed waiting ({causes}): a consequence of "
               f"{root.kind} on {ranks_text(root.ranks)}")
    detail = "\n".join(states[r].death.detail[:600] for r in ranks[:4])  # type: ignore
    return Finding(FindingKind.RANK_FAILED, Severity.INFO, tuple(ranks), None, summary, detail,
                   # no number here: findings are sorted after this (caused_by is remapped;
                   # a number in the text would not be), and people count from 1
                   f"Fix the root cause ({root.kind} on {ranks_text(root.ranks)}): "
                   f"{root.summary}",
                   {"consequence": True, "causes": {str(r): states[r].death.cause  # type: ignore
                                                    for r in ranks}}, caused_by=root_index)


def node_lost(node: NodeFacts, ranks: list[int], waits: list[Wait],
              states: dict[int, RankState]) -> Finding:
    """A node whose supervisor stopped answering: its ranks are unreachable, what they did
    after is unknown; the ranks that wait on them are not at fault."""
    waiting = sorted({w.rank for w in waits} - set(ranks))
    last = [f"rank {r} last seen {after_call(states[r])}" for r in ranks if r in states]
    summary = (f"node {node.node} (host {node.host}, {ranks_text(ranks)}) was lost: its "
               "supervisor stopped answering" +
               (f"; {ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} for it"
                if waiting else "; what its ranks did after that is unknown"))
    detail = "\n".join([f"Node 0 lost contact with node {node.node} (host {node.host}): no "
                        "message through the store since then, so its ranks are "
                        "unreachable, not at fault for what followed."] + last +
                       waits_text([w for w in waits if w.rank not in ranks], states))
    fix = (f"Find out what happened to host {node.host} (machine down, network, the "
           "supervisor killed or out of memory); its own run dir, if it survived, holds "
           "its traces: pass it to `ddpdoctor analyze` with node 0's.")
    return Finding(FindingKind.NODE_LOST, Severity.ERROR if waiting else Severity.WARNING,
                   tuple(sorted(ranks)), None, summary, detail, fix,
                   {"node": node.node, "host": node.host, "lost_at_ns": node.lost_at_ns,
                    "waiting": waiting})


def known(root: Finding, k: KnownFailure) -> Finding:
    """A root that is a known failure of torch, gloo or the launcher: said so, with the
    upstream issue and its workaround instead of a pointer into the user's code."""
    from ddpdoctor.analysis.causal.known_failures import evidence

    summary = f"a known failure outside your code ({k.title}): {root.summary}"
    detail = (f"ddpdoctor recognises this as a known failure: {k.title}.\nUpstream: "
              f"{k.upstream}." + (f"\nSeen here: {k.verified}." if k.verified else "") +
              f"\n{root.detail}")
    fix = root.fix if root.evidence.get("teardown") else k.workaround  # (already torch's)
    return replace(root, summary=summary, detail=detail, fix=fix,
                   evidence={**root.evidence, **evidence(k)})
