"""report.json (schema ddpdoctor.report/1): build it from a JobView and its findings.

Top level (contract): schema, outcome (completed | failed | hung | interrupted; a live
view, live: true, of a job that still runs with nothing wrong so far: running), command, world_size,
started_at and ended_at (ISO 8601, UTC), ranks, findings (each with caused_by: the index of
its root cause's finding, or null), waits (the wait-for graph: rank, waits_for, group, seq,
op).  Extensions: run_dir, live,
timeline, profile, problems, notices, exit_code, ddpdoctor_version; interrupted_by (the
signal that ended an interrupted run: SIGINT, SIGTERM, SIGHUP, or SIGPIPE when ddpdoctor's
output was closed); job_exit_code (the job's
own status after ddpdoctor stopped it); stopped, when ddpdoctor stopped processes of the job:
{reason: hang | mismatch | abandoned | interrupt | leftovers, signal: the first signal
(SIGTERM, SIGINT), pids: every process it reached, sigkill: those still alive after the
grace}; attempt and attempts, for a job torchrun restarted (see report.attempts).

transports: [{"group", "group_ranks", "transport": shm | gloo, "why", "ranks", "refused"}]:
  each process group's ring transport, as its ranks recorded it (see report/transports.py).
notices: [{"text", "ranks"}]: what ddpdoctor could not honour in this job (e.g. a DDP
  set-up its ring cannot reduce), each said once, with the ranks that said it.

ranks[i]:
  rank, host, pid; state (report/shown_state.py, the live view's too): starting |
  computing | in_collective | waiting (inside a call or init_process_group that a peer has
  not reached) | exited | failed | hung | stopped | killed | unreachable (its node was lost)
  | blocked (outside any call,
  using no CPU: blocked_on says in what: {syscall, wchan, meaning}, else null); exit_code: the process's status
  when known (negative: signal);
  step: optimizer steps taken; epoch; last_seq: last collective seq on the default group;
  current: the collective the rank is inside (seq, op, shapes, dtypes, since, callsite,
  group) or null; stack: py-spy frames innermost first ({name, filename, line}) or null,
  with stack_error saying why when null; recent: its last collectives.
timeline: {rank: [{seq, group, op, shapes, dtypes, callsite, start, end}]} (unix seconds;
  end null while inside).  profile: {rank: {compute_s, wait_s, collectives}}.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import ddpdoctor
from ddpdoctor.analysis.causal.facts import os_wait_of, state_of
from ddpdoctor.analysis.load.fr_dumps import NOTHING_PENDING
from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.align.clocks import host_now
from ddpdoctor.analysis.model import NS, Call, Finding, JobView, RankRun
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.shown_state import JobPeers, rank_shown_state
from ddpdoctor.report.transports import transports
from ddpdoctor.trace import layout as L

SCHEMA = "ddpdoctor.report/1"
OUTCOMES = ("completed", "failed", "hung", "interrupted")
LIVE_OUTCOMES = OUTCOMES + ("running",)  # a live view (live: true) of a job still running
TIMELINE_LEN = 200
RECENT_LEN = 20
MANY_RANKS = 64  # past this, each rank's timeline is cut to TIMELINE_LEN_MANY entries
TIMELINE_LEN_MANY = 16


def notices(job: JobView) -> list[dict[str, Any]]:
    """The ranks' ``notice`` meta events, one entry per text."""
    return [{"text": t, "ranks": r} for t, r in job.notices().items()]


def iso(ns: int | None) -> str | None:
    if not ns or ns <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(ns / NS, tz=dt.timezone.utc).isoformat(
            timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def timeline_entry(c: Call) -> dict[str, Any]:
    """A ``timeline`` (and ``recent``) entry: the call, which API issued it (``origin``: an
    Origin value, "user" for the user's own call) and the rank's iteration (null: unknown)."""
    return {"seq": c.seq, "group": c.group, "op": c.op,
            "shapes": [list(s) for s in c.in_shapes], "dtypes": list(c.dtypes),
            "callsite": c.short_site, "start": c.t_start / NS,
            "end": None if c.open else c.t_end / NS, "origin": c.origin.value,
            "iteration": c.iteration if c.iteration >= 0 else None}


def current_entry(c: Call | None) -> dict[str, Any] | None:
    """A rank's ``current`` entry: the call it is in (as ``timeline_entry``, with ``since``
    as ISO 8601 for its start), or None."""
    if c is None:
        return None
    return {"seq": c.seq, "op": c.op, "shapes": [list(s) for s in c.in_shapes],
            "dtypes": list(c.dtypes), "since": iso(c.t_start), "callsite": c.short_site,
            "group": c.group, "origin": c.origin.value,
            "iteration": c.iteration if c.iteration >= 0 else None}


def _membership(job: JobView) -> dict[str, Any]:
    """``membership``: the nodes and world size as first seen and at every change."""
    events = [{k: e.get(k) for k in ("nodes", "world_size", "attempt", "members")} |
              {"at": iso(e["t"]) if type(e.get("t")) is int else None}
              for e in job.supervisor_events if e.get("event") == "membership"]
    return {"membership": events} if events else {}


def rank_state(run: RankRun, job: JobView, peers: JobPeers | None = None) -> str:
    """The rank's state as the report shows it: the causal model's state of the rank, shown
    by the one function the live view uses too (report/shown_state.py).  ``peers`` is
    shared by the ranks of one view."""
    s = state_of(run, job)
    return rank_shown_state(
        s.kind, s.call if s.kind == StateKind.BLOCKED else None, s.since_ns,
        host_now(job, run.rank), peers or JobPeers(job), job.hang_timeout,
        killed=s.death is not None and s.death.signal is not None and not run.fault,
        in_init=s.mark == "init", job_hung=job.outcome == "hung")


def shown_states(job: JobView) -> list[str]:
    """Every rank's shown state (rank_state), the peers found once for them all."""
    peers = JobPeers(job)
    return [rank_state(run, job, peers) for run in job.ranks.values()]


def _exit_code(run: RankRun) -> int | None:
    if run.returncode is not None:
        return run.returncode
    if run.exited_cleanly():
        return 0
    return None


def _calls(run: RankRun) -> list[Call]:
    calls = [c for group in run.calls.values() for c in group[-TIMELINE_LEN:]]
    return sorted(calls, key=lambda c: c.t_start)[-TIMELINE_LEN:]


def profile(run: RankRun, now_ns: int) -> dict[str, Any]:
    """Time computing vs waiting in collectives, over the recorded span."""
    calls = _calls(run)
    if not calls:
        return {"compute_s": 0.0, "wait_s": 0.0, "collectives": 0}
    wait = sum(((c.t_end or now_ns) - c.t_start) for c in calls)
    span = max((c.t_end or now_ns) for c in calls) - calls[0].t_start
    return {"compute_s": round(max(0, span - wait) / NS, 6), "wait_s": round(wait / NS, 6),
            "collectives": len(calls)}


def rank_entry(run: RankRun, job: JobView, peers: JobPeers | None = None) -> dict[str, Any]:
    h = run.header
    calls = _calls(run)
    return {
        "rank": run.rank, "host": h.host, "pid": h.pid, "state": rank_state(run, job, peers),
        "exit_code": _exit_code(run), "step": max(h.step, 0),
        "epoch": h.epoch if h.epoch >= 0 else None,
        "last_seq": run.last_seq(),
        "current": current_entry(run.open_call()), "stack": run.stack,
        "stack_error": run.stack_error,
        "blocked_on": _blocked_on(run, job),
        "recent": [timeline_entry(c) for c in calls[-(RECENT_LEN if len(job.ranks) <= MANY_RANKS
                                               else TIMELINE_LEN_MANY // 2):]],
    }


def _blocked_on(run: RankRun, job: JobView) -> dict[str, Any] | None:
    """What the OS said an idle rank waits on ({syscall, wchan, meaning}), else null."""
    said = os_wait_of(run, job) if run.header.state != L.RankState.EXITED else None
    return {k: said.get(k) for k in ("syscall", "wchan", "meaning")} if said else None


def build(job: JobView, findings: list[Finding], outcome: str,
          exit_code: int | None = None, started_ns: int | None = None,
          waits: list[Any] | None = None) -> dict[str, Any]:
    """The report dict for ``job`` (see the module docstring for every field)."""
    snapshot = NOTHING_PENDING in job.problems  # dumps alone: the job ran when dumped
    if outcome not in (LIVE_OUTCOMES if job.live or snapshot else OUTCOMES):
        raise ValueError(f"unknown outcome {outcome!r}")
    starts = [r.header.started_ns for r in job.ranks.values()] + [
        t.header.started_ns for t in job.launchers]
    ranks = [job.ranks[r] for r in sorted(job.ranks)]
    peers = JobPeers(job)
    timeline_len = TIMELINE_LEN if len(ranks) <= MANY_RANKS else TIMELINE_LEN_MANY
    return {
        "schema": SCHEMA,
        "outcome": outcome,
        "command": redact_argv(job.command),
        "world_size": job.world_size,
        "started_at": iso(started_ns or job.started_ns or (min(starts) if starts else
                                                          job.now_ns)),
        "ended_at": iso(job.ended_ns or job.now_ns),
        "ranks": [rank_entry(r, job, peers) for r in ranks],
        "findings": [f.to_dict() for f in findings],
        "waits": [w.to_dict() for w in waits or []],
        "exit_code": exit_code,
        "run_dir": str(job.run_dirs[0]) if len(job.run_dirs) == 1 else
        [str(p) for p in job.run_dirs],
        "live": job.live,
        "timeline": {str(r.rank): [timeline_entry(c) for c in _calls(r)[-timeline_len:]]
                     for r in ranks},
        "profile": {str(r.rank): profile(r, host_now(job, r.rank)) for r in ranks},
        "problems": list(dict.fromkeys(job.problems)),
        "notices": notices(job),
        "transports": transports(job),
        "ddpdoctor_version": ddpdoctor.__version__,
        **_membership(job),
    }
