"""LiveStateWriter: the supervisor's live view of the job, published as RUN_DIR/live.json.

The file (schema ``ddpdoctor.live/1``) is what a live UI shows without rebuilding a report:
supervisor_pid, revision (bumped when something worth judging
changed: a rank ended or stopped, a mismatch seen, a straggler said, a rank blocked past
1, 2, 4, 8... s), command, world_size, started_at, hang_timeout, ranks (rank, host, pid,
state, exit_code, step, epoch, last_seq, current: as in report.json), findings (the
mismatch the supervisor saw, as report.json writes it), problems.  It is replaced
atomically (write, then rename), at most every ``every_s`` and only when it changed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.model import Call
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.schema import current_entry, iso
from ddpdoctor.report.shown_state import IN_CALL, ShownFacts, shown_state
from ddpdoctor.rundir.layout import LIVE_STATE_FILE
from ddpdoctor.rundir.safe_path import write_bytes_atomic
from ddpdoctor.supervisor.watch import LiveJob, LiveRank
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.world import world_size

SCHEMA = "ddpdoctor.live/1"
PUBLISH_EVERY_S = 0.25  # the live UI polls at 4 Hz


def lowest_seq(ranks: dict[int, LiveRank], group: str, members: list[int]) -> int:
    """The lowest seq the members of ``group`` have reached (-1: one has not called it, or
    has no trace yet)."""
    return min((ranks[r].hi.get(group, -1) if r in ranks else -1 for r in members),
               default=-1)


def _arrived(p: LiveRank | None) -> bool:
    """Has the rank entered init_process_group (it is inside, or past it)?"""
    return p is not None and (p.header.state != L.RankState.STARTING or any(
        c.kind == L.RecordKind.MARK and c.op == "init" for c in p.open.values()))


def live_world(ranks: dict[int, LiveRank]) -> int:
    """The job's world size as its live ranks' headers say it (trace/world.py's rule)."""
    return world_size((rank, p.header.world_size) for rank, p in ranks.items())


def all_arrived(ranks: dict[int, LiveRank], world: int) -> bool:
    """Has every rank of the world entered init_process_group?"""
    return all(_arrived(ranks.get(r)) for r in range(world))


@dataclass(frozen=True)
class LiveFacts:
    """What the supervisor knows of the job beyond a rank's own trace: each other node's
    clock skew (host -> ns, to time a wait on the rank's own clock), and the pids that the
    OS said wait idle (pid -> records read when said: no call since, see os_wait)."""

    skews: dict[str, int] = field(default_factory=dict)
    idle: dict[int, int] = field(default_factory=dict)
    all_arrived: bool | None = None  # every rank of the world entered init (None: not known)
    job_hung: bool = False  # the causal model judged the job hung (the supervisor stops it)


def causal_kind(p: LiveRank, call: Call | None, facts: LiveFacts) -> tuple[StateKind, bool]:
    """The causal model's state kind of a rank from what the supervisor follows live, and
    whether it was killed (ended by a signal without last words)."""
    state = p.header.state
    if state == L.RankState.FAILED:
        return StateKind.DIED, False
    if state == L.RankState.EXITED:
        return StateKind.EXITED, False
    if p.gone:
        return (StateKind.EXITED, False) if p.exited_clean else (StateKind.DIED, True)
    if p.stop_logged:
        return StateKind.STOPPED, False
    if call is not None:
        return (StateKind.RENDEZVOUS if call.kind == L.RecordKind.MARK else
                StateKind.BLOCKED), False
    if facts.idle.get(p.header.pid) == p.read_upto:
        return StateKind.OS_BLOCKED, False
    return (StateKind.NOT_ARRIVED if state == L.RankState.STARTING else
            StateKind.COMPUTING), False


def rank_state(p: LiveRank, ranks: dict[int, LiveRank], now_ns: int,
               hang_timeout: float, lowest: dict[str, int] | None = None,
               call: Call | None = None, facts: LiveFacts | None = None) -> str:
    """The rank's state from what the supervisor follows live, shown by the report's one
    rule (report/shown_state.py): a rank inside a call that peers of its group have not
    reached yet is waiting; the rank itself has reached the call, so the group's lowest
    seq below it means a peer is behind.  ``lowest`` caches each group's lowest seq across
    the ranks of one look."""
    facts = facts or LiveFacts()
    call = call if call is not None else p.oldest_open()
    kind, killed = causal_kind(p, call, facts)
    behind = False
    if kind == StateKind.RENDEZVOUS and call is not None and call.op == "init":
        behind = not (facts.all_arrived if facts.all_arrived is not None else
                      all_arrived(ranks, live_world(ranks)))
    elif kind == StateKind.BLOCKED and call is not None:
        lowest = {} if lowest is None else lowest
        if call.group not in lowest:
            members = p.group_ranks.get(call.group) or list(ranks)
            lowest[call.group] = lowest_seq(ranks, call.group, members)
        behind = lowest[call.group] < call.seq
    here = now_ns + facts.skews.get(str(p.header.host), 0)
    waited = here - call.t_start if kind in IN_CALL and call is not None else 0
    return shown_state(ShownFacts(kind, killed=killed, waited_ns=waited, peers_behind=behind,
                                  p2p=call is not None and call.kind == L.RecordKind.P2P,
                                  job_hung=facts.job_hung), hang_timeout)


def _rank_entry(p: LiveRank, ranks: dict[int, LiveRank], now_ns: int,
                hang_timeout: float, lowest: dict[str, int],
                facts: LiveFacts) -> dict[str, Any]:
    h, call = p.header, p.oldest_open()
    return {"rank": h.rank, "host": h.host, "pid": h.pid,
            "state": rank_state(p, ranks, now_ns, hang_timeout, lowest, call, facts),
            "exit_code": 0 if h.state == L.RankState.EXITED else h.exit_code,
            "step": max(h.step, 0), "epoch": h.epoch if h.epoch >= 0 else None,
            "last_seq": h.last_seq if h.last_seq >= 0 else None,
            "current": current_entry(call)}


def live_facts(sup: Any, ranks: dict[int, LiveRank]) -> LiveFacts:
    """The supervisor's facts beyond the traces (see LiveFacts), once per look."""
    leader = getattr(sup, "leader", None)
    skews = {v.host: v.skew_ns for v in list(leader.nodes.values())
             if v.host and v.skew_ns is not None} if leader is not None else {}
    progress = getattr(sup, "progress", None)
    idle = {}
    for pid, said in dict(getattr(sup, "_os_waits", {})).items():
        prog = progress.by_pid.get(pid) if progress is not None else None
        if prog is not None and not prog.cpu_busy:
            idle[pid] = said[1]
    return LiveFacts(skews, idle, all_arrived(ranks, live_world(ranks)),
                     bool(getattr(sup, "judged_hung", False)))


def _blocked_bucket(live: LiveJob) -> int:
    """0 while no rank waits 1 s in one call, then 1, 2, 3... as the wait passes 1, 2, 4... s."""
    longest = live.longest_wait()
    if longest is None or longest[2] < 1.0:
        return 0
    return int(longest[2]).bit_length()


class LiveStateWriter:
    """Publishes the supervisor's live state (see the module docstring)."""

    def __init__(self, run_dir: Path, every_s: float = PUBLISH_EVERY_S):
        self.path = Path(run_dir) / LIVE_STATE_FILE
        self.every_s = every_s
        self.revision = 0
        self._facts: tuple = ()
        self._next = 0.0
        self._last = ""
        self._failed = False

    def publish(self, sup: Any) -> None:
        """Write the state of supervisor ``sup`` when due and changed; never raises (a
        live view is a bonus: its failure is noted once in the live problems)."""
        now = time.monotonic()
        if now < self._next or self._failed:
            return
        self._next = now + self.every_s
        self.path = Path(sup.run_dir) / LIVE_STATE_FILE  # a restarted job's attempt dir
        try:
            text = json.dumps(self.state(sup), separators=(",", ":"), default=str)
            if text != self._last:
                self._write(text)
                self._last = text
        except (OSError, ValueError, TypeError, AttributeError) as e:
            self._failed = True
            sup.live.problems.append(f"cannot write {self.path.name}: {e}")

    def state(self, sup: Any) -> dict[str, Any]:
        """The live state of supervisor ``sup`` as a dict (no write)."""
        live: LiveJob = sup.live
        ranks = live.ranks()
        now_ns = time.time_ns()
        timeout = float(sup.config.hang_timeout)
        facts = (tuple(sorted(r for r, p in ranks.items() if p.gone)),
                 tuple(sorted(r for r, p in ranks.items() if p.stop_logged)),
                 bool(sup._warned_mismatch), len(sup._stragglers_said),
                 sup._failure_seen_at is not None, _blocked_bucket(live), len(ranks))
        if facts != self._facts:
            self._facts = facts
            self.revision += 1
        findings, lowest, facts = [], {}, live_facts(sup, ranks)
        if sup._warned_mismatch:
            div = live.divergence()
            if div is not None:
                from ddpdoctor.analysis.causal.mismatch import finding_for

                findings.append(finding_for(div).to_dict())
        return {
            "schema": SCHEMA, "supervisor_pid": os.getpid(), "revision": self.revision, "command": redact_argv(sup.config.command),
            "world_size": live_world(ranks) or None,
            "started_at": iso(sup.started_ns), "hang_timeout": timeout,
            "ranks": [_rank_entry(ranks[r], ranks, now_ns, timeout, lowest, facts)
                      for r in sorted(ranks)],
            "findings": findings, "problems": list(dict.fromkeys(live.problems)),
        }

    def _write(self, text: str) -> None:
        """Replace the file atomically: a reader sees the old state or the new, whole."""
        write_bytes_atomic(self.path, text.encode(), sync=False)
