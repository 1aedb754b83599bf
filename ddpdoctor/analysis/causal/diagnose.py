"""diagnose(job): rank states -> wait-for graph -> root causes -> findings with consequences."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ddpdoctor.analysis.causal import findings as F
from ddpdoctor.analysis.causal import known_failures, mismatch, uneven
from ddpdoctor.analysis.causal.alike import about_the_same_time, exited_alike, same_failure
from ddpdoctor.analysis.causal.ddp_errors import construction_mismatch
from ddpdoctor.analysis.causal.decided import with_recorded_decisions
from ddpdoctor.analysis.causal.exchange import recorded_splits, split_sizes_mismatch
from ddpdoctor.analysis.causal.facts import rank_states
from ddpdoctor.analysis.causal.graph import Wait, cycles, reachable, sinks, wait_for_graph
from ddpdoctor.analysis.causal.p2p import find_pair_mismatch, pair_finding
from ddpdoctor.analysis.causal.group_calls import new_group_divergence
from ddpdoctor.analysis.causal.pattern import breaks_pattern, pattern_culprits, stream_until
from ddpdoctor.analysis.causal.stall import stalled_behind, stalled_call, stalled_ring
from ddpdoctor.analysis.causal.state import RankState, StateKind
from ddpdoctor.analysis.causal.verdict import assess
from ddpdoctor.analysis.align.clocks import host_now, ordered, same_host
from ddpdoctor.analysis.model import NS, Finding, FindingKind, JobView, Severity


@dataclass
class Diagnosis:
    """The causal model of a job: typed states, the wait-for graph, and the findings (root
    causes as errors first; consequences with ``caused_by``)."""

    states: dict[int, RankState]
    waits: list[Wait]
    findings: list[Finding] = field(default_factory=list)


def _judged(job: JobView, states: dict[int, RankState], waits: list[Wait]) -> list[Wait]:
    """The waits worth judging.  Offline, after a verdict, or interrupted by the user: all
    of them (what was seen is told).  Live: the ones the stop rule calls hopeless (past the
    hang timeout, on ranks that make no progress), so a live view never blames a rank the
    supervisor lets run; a rank that failed of a peer, once its wait passed the timeout."""
    if not job.live or job.outcome is not None or interrupted(job):
        return list(waits)
    hopeless = set(assess(job, job.hang_timeout, states, waits).hopeless)
    limit = job.hang_timeout * NS
    return [w for w in waits if w in hopeless or (
        states[w.rank].kind == StateKind.PEER_FAILED and states[w.rank].since_ns is not None
        and host_now(job, w.rank) - states[w.rank].since_ns >= limit)]  # type: ignore


SUSPECT_WAIT_NS = 1 * NS  # an interrupted run: a shorter wait is a step in progress


def interrupted(job: JobView) -> bool:
    """Was the job stopped by its user (Ctrl-C) before any verdict?"""
    return job.outcome == "interrupted" or any(
        e.get("event") == "verdict" and e.get("reason") == "interrupt"
        for e in job.supervisor_events)


def _interrupted_at(job: JobView) -> int | None:
    """When the user interrupted the job (the supervisor's clock), if it was."""
    return next((int(e["t"]) for e in job.supervisor_events if e.get("event") == "verdict"
                 and e.get("reason") == "interrupt" and isinstance(e.get("t"), int)), None)


def _waited_ns(job: JobView, states: dict[int, RankState], w: Wait) -> int:
    """How long ``w`` had lasted when the job was interrupted (else until now)."""
    since = states[w.rank].since_ns
    if since is None:
        return 0
    now, at = host_now(job, w.rank), _interrupted_at(job)
    if at is not None and now == job.now_ns:  # one clock: the supervisor's is the ranks'
        now = min(now, at)
    return max(0, now - since)


def _when_interrupted(f: Finding, job: JobView, waited_ns: int) -> Finding:
    """A root told from waits of an interrupted run, shorter than the hang timeout: what
    was seen, as a warning (a suspect, not a verdict)."""
    if waited_ns >= job.hang_timeout * NS:
        return f
    secs = waited_ns / NS
    note = (f"The run was interrupted after {secs:.1f} s of this wait, under the "
            f"{job.hang_timeout:g} s hang timeout: this is what the ranks were doing then, "
            "a suspect rather than a verdict.")
    detail = "\n".join(f"Waiting for {secs:.1f} s when interrupted." if
                       line.startswith("Waiting for ") else line
                       for line in f.detail.splitlines())
    return replace(f, severity=Severity.WARNING,
                   summary=f"when interrupted, {f.summary} (for {secs:.1f} s)",
                   detail=f"{note}\n{detail}",
                   evidence={**f.evidence, "interrupted": {"waited_s": round(secs, 3)}})


class _Builder:
    """Collects root findings and which ranks each one explains."""

    def __init__(self) -> None:
        self.roots: list[Finding] = []
        self.explains: list[set[int]] = []  # per root: culprit ranks and the ranks it blocks

    def add(self, f: Finding, explains: set[int]) -> int:
        self.roots.append(f)
        self.explains.append(set(f.ranks) | explains)
        return len(self.roots) - 1

    def root_of(self, rank: int, waits: list[Wait]) -> int | None:
        near = reachable(rank, waits) | {rank}
        for i, ranks in enumerate(self.explains):
            if ranks & near:
                return i
        return None


def _cycle_finding(cycle: tuple[int, ...], job: JobView, by_rank: dict[int, Wait],
                   states: dict[int, RankState]) -> Finding:
    verdicts = {}
    for r in cycle:
        call = states[r].call
        if call is not None and r in job.ranks:
            verdicts[r] = breaks_pattern(stream_until(job.ranks[r], call))
    blamed = pattern_culprits(verdicts) if len(verdicts) == len(cycle) else ()
    if blamed:
        return F.skipped(list(blamed), cycle, by_rank, states)
    return F.deadlock(cycle, by_rank, states)


def diagnose(job: JobView) -> Diagnosis:
    """The one causal model of ``job`` (live or offline)."""
    states = rank_states(job)
    waits = wait_for_graph(job, states)
    judged = _judged(job, states, waits)
    stopped_early = interrupted(job)
    if stopped_early:
        judged = [w for w in judged if _waited_ns(job, states, w) >= SUSPECT_WAIT_NS]
    by_rank = {w.rank: w for w in waits}
    b = _Builder()
    covered: dict[int, int] = {}  # ranks whose own error a root already tells -> that root
    built = construction_mismatch(job, states)
    if built is not None:
        raised = set(built.evidence["raised"])
        covered = dict.fromkeys(raised, b.add(built, raised))
    grouped = new_group_divergence(job)
    if grouped is not None:  # every later group is shifted: the waits it leads to are its
        b.add(grouped, set(job.ranks))
    split = recorded_splits(job) or split_sizes_mismatch(job, states)
    if split is not None:  # every member's error in and after the exchange is its echo
        members = set(job.group_members(split.evidence["group"])) | set(split.ranks)
        covered.update(dict.fromkeys(members, b.add(split, members)))
    pair = find_pair_mismatch(job, states)
    paired: set[int] = set()
    if pair is not None:  # a send and a recv that never meet: the receiver's abort is its echo
        paired = {pair.sender, pair.receiver}
        covered.update(dict.fromkeys(paired, b.add(pair_finding(job, pair), paired)))
    uneven_found = uneven.detect(job)
    late: list[Finding] = []
    for f in uneven_found:
        if f.severity == Severity.ERROR:
            b.add(f, set())
        else:
            late.append(f)
    consequences: list[tuple[Finding, int]] = []
    for div in mismatch.divergences(job):
        f = mismatch.finding_for(div, job)
        cause = next((i for i, r in enumerate(b.roots)
                      if r.kind == FindingKind.UNEVEN_BATCHES and r.seq == div.seq and
                      r.evidence.get("group") == div.group), None)
        if cause is not None:
            consequences.append((replace(f, severity=Severity.INFO, summary=(
                f"{f.summary} (a consequence of the uneven batches: "
                f"{F.ranks_text(b.roots[cause].ranks)} left the loop and called what "
                "follows it)")), cause))
        else:
            cause = b.add(f, set(div.calls))
        for r in div.calls:  # an error raised inside the mismatched call is its echo
            s = states.get(r)
            if s is not None and s.kind == StateKind.DIED and s.call is not None and \
                    (s.call.group, s.call.seq) == (div.group, div.seq):
                covered.setdefault(r, cause)
    first_wait_root = len(b.roots)  # roots told from waits from here on (until deaths)
    if not b.roots:  # ranks behind in a call every member entered, on a stalled link
        behind = stalled_behind(job, states, judged)
        if behind is not None:
            b.add(behind, set(states))
    for cycle in cycles(judged):  # (groups shifted by a new_group: the waits are its)
        if grouped is None and all(r in by_rank for r in cycle) and \
                not set(cycle) <= paired:  # (a pair that cannot meet is no cycle)
            b.add(_cycle_finding(cycle, job, by_rank, states), set(cycle))
    for target, into in sinks(judged, states).items():
        s = states[target]
        if b.root_of(target, []) is not None and s.kind != StateKind.DIED:
            b.explains[b.root_of(target, [])].update(w.rank for w in into)  # type: ignore
            continue
        if s.kind == StateKind.DIED and not _left_early(s):
            continue  # its own finding below
        if s.kind == StateKind.PEER_FAILED and any(
                o.kind == StateKind.DIED for o in states.values()):
            continue  # ended by a peer's failure (the launcher's SIGTERM): that failure's
        blocked_elsewhere = s.kind == StateKind.BLOCKED
        if blocked_elsewhere and b.roots:
            continue  # blocked in a call of its own that another root explains
        if s.kind == StateKind.UNREACHABLE:
            _lost(job, states, target, judged, b)
            continue
        f = F.exited_early(s, into, states, job) if s.kind == StateKind.EXITED or \
            _left_early(s) else \
            F.absent_rank(job, s, into, states)
        alike = exited_alike(b.roots, f)
        if alike is not None:  # ranks that ran as many steps and left: one finding
            b.roots[alike] = F.exited_together(b.roots[alike], f)
            b.explains[alike].update({s.rank, *(w.rank for w in into)})
            continue
        b.add(f, {w.rank for w in into})
    for node in job.nodes.values():  # lost nodes nobody waited on: said all the same
        lost = _lost_ranks(job, states, node.host)
        if node.lost and lost and all(b.root_of(r, []) is None for r in lost):
            _lost(job, states, lost[0], judged, b)
    from_waits = range(first_wait_root, len(b.roots))
    _deaths(job, states, judged, b, consequences, covered)
    if not b.roots:
        stall = _stalled(job, states)
        if stall is not None:
            from_waits = range(0, b.add(stall, set()) + 1)
    if stopped_early:
        for i in from_waits:
            longest = max((_waited_ns(job, states, w) for w in judged
                           if w.rank in b.explains[i]), default=0)
            b.roots[i] = _when_interrupted(b.roots[i], job, longest)
    findings = with_recorded_decisions(_assemble(b.roots, consequences, late), job, states)
    return Diagnosis(states, waits, findings)


def _deaths(job: JobView, states: dict[int, RankState], waits: list[Wait], b: _Builder,
            consequences: list[tuple[Finding, int]], covered: dict[int, int]) -> None:
    """Ranks that died on their own are roots; ranks that failed of a peer's absence, or
    whose error a root already tells (``covered``), are consequences of that root."""
    into: dict[int, list[Wait]] = {}
    for w in waits:
        for t in w.waits_for:
            into.setdefault(t, []).append(w)
    dead = ordered(job, (s for s in states.values() if s.kind == StateKind.DIED and s.death),
                   lambda s: s.rank, lambda s: s.death.at_ns,  # type: ignore[union-attr]
                   lambda s: s.call.seq if s.call is not None else None)
    told: set[int] = set()
    linked: dict[int, list[int]] = {}
    for s in dead:
        if s.rank in told:
            continue
        if s.rank in covered:  # (a rank_failed root quotes its own culprits' error)
            told.add(s.rank)
            root = b.roots[covered[s.rank]]
            if root.kind != FindingKind.RANK_FAILED or s.rank not in root.ranks:
                linked.setdefault(covered[s.rank], []).append(s.rank)
            continue
        if s.death.teardown:  # type: ignore[union-attr]
            b.add(_if_known(F.teardown(s, _finished(s, states, waits)), job, states, s.rank),
                  set())
            continue
        owner = _owner(s, b) if _left_early(s) else None
        if owner is not None:  # it left early (a root names it): the abort is how it left
            b.roots[owner] = F.died_leaving(b.roots[owner], s)
            told.add(s.rank)
            continue
        # ranks that failed the same way at about the same time share one finding
        same = [o for o in dead if o.rank not in told and not o.death.teardown and  # type: ignore
                same_failure(o.death, s.death) and  # type: ignore[arg-type]
                about_the_same_time(job, o, s)]
        told.update(o.rank for o in same)
        waiting = [w for o in same for w in into.get(o.rank, [])]
        b.add(_if_known(F.died(s, waiting, job, tuple(o.rank for o in same)), job, states,
                        s.rank), {w.rank for w in waiting})
    failed = [s for s in states.values() if s.kind == StateKind.PEER_FAILED and s.death]
    orphans = []
    for s in failed:
        i = b.root_of(s.rank, waits)
        if i is None:
            i = _root_by_evidence(s, job, states, b)
        if i is None:
            orphans.append(s)
        else:
            linked.setdefault(i, []).append(s.rank)
    alike: dict[str, int] = {}  # known failure -> its root (one for the ranks it struck)
    for s in orphans:  # nothing else explains it: its error is the root
        k = known_failures.match(job, states, s.rank)
        if k is not None and k.id in alike:
            linked.setdefault(alike[k.id], []).append(s.rank)
            continue
        i = b.add(_if_known(F.died(s, into.get(s.rank, []), job), job, states, s.rank), set())
        if k is not None:
            alike[k.id] = i
    for i, ranks in linked.items():
        if b.roots[i].kind == FindingKind.RANK_FAILED:  # one finding: a failure and its echo
            b.roots[i] = F.with_consequences(b.roots[i], sorted(ranks), states)
        else:
            consequences.append((F.consequence(sorted(ranks), states, b.roots[i], i), i))


def _root_by_evidence(s: RankState, job: JobView, states: dict[int, RankState],
                      b: _Builder) -> int | None:
    """The root a rank that failed of a peer's absence (and waits on no one any more) is a
    consequence of: a root naming a peer of the group it failed in, that peer gone first
    (died earlier on one clock, or not dead: a hang or an exit); failing that, any root
    naming such a peer; else none (its failure is its own finding).  Never a root about
    ranks it shares no group with."""
    group = s.call.group if s.call is not None else None
    peers = set(job.group_members(group) if group is not None else states) - {s.rank}
    named = [i for i, f in enumerate(b.roots) if set(f.ranks) & peers]

    def first(r: int) -> bool:
        o = states.get(r)
        if o is None or o.death is None or s.death is None:
            return True
        return not same_host(job, r, s.rank) or o.death.at_ns <= s.death.at_ns

    earlier = [i for i in named if any(first(r) for r in set(b.roots[i].ranks) & peers)]
    return (earlier or named or [None])[0]


def _if_known(root: Finding, job: JobView, states: dict[int, RankState], rank: int) -> Finding:
    """The root as a known failure of torch when the table says it is one."""
    k = known_failures.match(job, states, rank)
    return F.known(root, k) if k is not None else root


def _lost_ranks(job: JobView, states: dict[int, RankState], host: str) -> list[int]:
    return [r for r, s in states.items() if s.kind == StateKind.UNREACHABLE and
            r in job.ranks and str(job.ranks[r].header.host) == host]


def _lost(job: JobView, states: dict[int, RankState], target: int, waits: list[Wait],
          b: _Builder) -> None:
    """One node_lost root for the lost node of ``target``, naming all its unreachable ranks."""
    host = str(job.ranks[target].header.host)
    ranks = _lost_ranks(job, states, host)
    into = [w for w in waits if set(w.waits_for) & set(ranks)]
    b.add(F.node_lost(job.nodes[host], ranks, into, states), {w.rank for w in into})


def _left_early(s: RankState) -> bool:
    return s.death is not None and s.death.left_early and \
        (s.call is None or not s.call.open)


def _owner(s: RankState, b: _Builder) -> int | None:
    """The root that names ``s.rank`` as its culprit, if any."""
    return next((i for i, f in enumerate(b.roots) if s.rank in f.ranks), None)


def _finished(dead: RankState, states: dict[int, RankState], waits: list[Wait]) -> bool:
    """Did the job otherwise finish: nobody waits, and every other rank exited, aborted in
    teardown too, or was terminated by its launcher outside any call?"""
    if any(w.waits_for for w in waits):
        return False
    for o in states.values():
        if o.rank == dead.rank or o.kind == StateKind.EXITED:
            continue
        d = o.death
        if d is None or not (d.teardown or d.signal == "SIGTERM") or \
                (o.call is not None and o.call.open):
            return False
    return True


def _stalled(job: JobView, states: dict[int, RankState]) -> Finding | None:
    """Every member inside the same call and none returns: the ring step that never
    completed (the DDP ring records its sends and receives), else the call itself."""
    if job.live and job.outcome is None and not interrupted(job):
        return None
    blocked = {r: s.call for r, s in states.items()
               if s.kind == StateKind.BLOCKED and s.call is not None}
    ring = stalled_ring(job, blocked, states) if blocked else None  # type: ignore[arg-type]
    return ring if ring is not None else stalled_call(job, states)


def _assemble(roots: list[Finding], consequences: list[tuple[Finding, int]],
              late: list[Finding]) -> list[Finding]:
    """Roots (errors first, then warnings), the other findings, then consequences; each
    consequence's caused_by is its root's index in the returned list."""
    order = sorted(range(len(roots)), key=lambda i: (roots[i].severity != Severity.ERROR,
                                                     roots[i].severity != Severity.WARNING))
    where = {old: new for new, old in enumerate(order)}
    out = [roots[i] for i in order] + late
    out += [replace(f, caused_by=where[i]) for f, i in consequences]
    return out
