"""LiveStateWriter: the supervisor's live view of the job, published as RUN_DIR/live.json.

The file (schema ``ddpdoctor.live/1``) is what a live UI shows without rebuilding a report:
supervisor_pid, revision (bumped when something worth judging
changed: a rank ended or stopped, a mismatch seen, a straggler said, a rank blocked past
1, 2, 4, 8... s), command, world_size, started_at, hang_timeout, ranks (rank, host, pid,
state, exit_code, step, epoch, last_seq, current: as in report.json), findings (the
mismatch the supervisor saw, as report.json writes it), problems.  It is replaced
atomically (write, then rename), at most every ``every_s`` and only when it changed.
A rank's state is the report's one function (report/shown_state.rank_shown_state) over
the stand-in of the causal state that the traces followed live give (``causal_kind``).
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
from ddpdoctor.report.shown_state import rank_shown_state
from ddpdoctor.rundir.layout import LIVE_STATE_FILE
from ddpdoctor.rundir.safe_path import write_bytes_atomic
from ddpdoctor.supervisor.watch import LiveJob, LiveRank
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.world import world_size

SCHEMA = "ddpdoctor.live/1"
PUBLISH_EVERY_S = 0.25  # the live UI polls at 4 Hz


@dataclass(frozen=True)
class WatchFacts:
    """What the supervisor knows of the job beyond the ranks' traces, as live.json shows it.

    command, started_ns, hang_timeout: the run's.  mismatch_seen: a divergence was said
    (its finding is shown).  stragglers_said: how many straggler notices.  failure_seen: a
    rank died.  job_hung: the causal model judged the job hung (the supervisor stops it).
    skews: each other node's clock skew (host -> ns, to time a wait on the rank's own
    clock).  idle: the pids that the OS said wait idle (pid -> records read when said: no
    call since, see os_wait)."""

    command: tuple[str, ...]
    started_ns: int
    hang_timeout: float
    mismatch_seen: bool = False
    stragglers_said: int = 0
    failure_seen: bool = False
    job_hung: bool = False
    skews: dict[str, int] = field(default_factory=dict)
    idle: dict[int, int] = field(default_factory=dict)


class LivePeers:
    """The peers of the ranks followed live (each group's lowest seq found once a look)."""

    def __init__(self, ranks: dict[int, LiveRank]) -> None:
        self.ranks = ranks
        self._lowest: dict[str, int] = {}
        self._all_arrived: bool | None = None

    def lowest_seq(self, group: str) -> int:
        if group not in self._lowest:
            members = next((p.group_ranks[group] for p in self.ranks.values()
                            if p.group_ranks.get(group)), list(self.ranks))
            self._lowest[group] = min((self.ranks[r].hi.get(group, -1) if r in self.ranks
                                       else -1 for r in members), default=-1)
        return self._lowest[group]

    def all_arrived(self) -> bool:
        if self._all_arrived is None:
            self._all_arrived = all(_arrived(self.ranks.get(r))
                                    for r in range(live_world(self.ranks)))
        return self._all_arrived


def _arrived(p: LiveRank | None) -> bool:
    """Has the rank entered init_process_group (it is inside, or past it)?"""
    return p is not None and (p.header.state != L.RankState.STARTING or any(
        c.kind == L.RecordKind.MARK and c.op == "init" for c in p.open.values()))


def live_world(ranks: dict[int, LiveRank]) -> int:
    """The job's world size as its live ranks' headers say it (trace/world.py's rule)."""
    return world_size((rank, p.header.world_size) for rank, p in ranks.items())


def causal_kind(p: LiveRank, call: Call | None, idle: dict[int, int]) -> tuple[StateKind, bool]:
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
    if idle.get(p.header.pid) == p.read_upto:
        return StateKind.OS_BLOCKED, False
    return (StateKind.NOT_ARRIVED if state == L.RankState.STARTING else
            StateKind.COMPUTING), False


def rank_state(p: LiveRank, peers: LivePeers, now_ns: int, facts: WatchFacts) -> str:
    """The rank's shown state from what the supervisor follows live."""
    call = p.oldest_open()
    kind, killed = causal_kind(p, call, facts.idle)
    return rank_shown_state(kind, call, call.t_start if call is not None else None,
                            now_ns + facts.skews.get(str(p.header.host), 0), peers,
                            facts.hang_timeout, killed=killed,
                            in_init=call is not None and call.op == "init",
                            job_hung=facts.job_hung)


def _rank_entry(p: LiveRank, peers: LivePeers, now_ns: int,
                facts: WatchFacts) -> dict[str, Any]:
    h = p.header
    return {"rank": h.rank, "host": h.host, "pid": h.pid,
            "state": rank_state(p, peers, now_ns, facts),
            "exit_code": 0 if h.state == L.RankState.EXITED else h.exit_code,
            "step": max(h.step, 0), "epoch": h.epoch if h.epoch >= 0 else None,
            "last_seq": h.last_seq if h.last_seq >= 0 else None,
            "current": current_entry(p.oldest_open())}


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

    def due(self) -> bool:
        """Is a look due (at most every ``every_s``; never again after a failed write)?"""
        now = time.monotonic()
        if now < self._next or self._failed:
            return False
        self._next = now + self.every_s
        return True

    def publish(self, live: LiveJob, facts: WatchFacts) -> None:
        """Write the state of the job when it changed; never raises (a live view is a
        bonus: its failure is noted once in the live problems)."""
        try:
            text = json.dumps(self.state(live, facts), separators=(",", ":"), default=str)
            if text != self._last:
                self._write(text)
                self._last = text
        except (OSError, ValueError, TypeError, AttributeError) as e:
            self._failed = True
            live.problems.append(f"cannot write {self.path.name}: {e}")

    def state(self, live: LiveJob, facts: WatchFacts) -> dict[str, Any]:
        """The live state as a dict (no write)."""
        ranks = live.ranks()
        now_ns = time.time_ns()
        changed = (tuple(sorted(r for r, p in ranks.items() if p.gone)),
                   tuple(sorted(r for r, p in ranks.items() if p.stop_logged)),
                   facts.mismatch_seen, facts.stragglers_said, facts.failure_seen,
                   _blocked_bucket(live), len(ranks))
        if changed != self._facts:
            self._facts = changed
            self.revision += 1
        findings = []
        if facts.mismatch_seen:
            div = live.divergence()
            if div is not None:
                from ddpdoctor.analysis.causal.mismatch import finding_for

                findings.append(finding_for(div).to_dict())
        peers = LivePeers(ranks)
        return {
            "schema": SCHEMA, "supervisor_pid": os.getpid(), "revision": self.revision,
            "command": redact_argv(list(facts.command)),
            "world_size": live_world(ranks) or None,
            "started_at": iso(facts.started_ns), "hang_timeout": float(facts.hang_timeout),
            "ranks": [_rank_entry(ranks[r], peers, now_ns, facts) for r in sorted(ranks)],
            "findings": findings, "problems": list(dict.fromkeys(live.problems)),
        }

    def _write(self, text: str) -> None:
        """Replace the file atomically: a reader sees the old state or the new, whole."""
        write_bytes_atomic(self.path, text.encode(), sync=False)
