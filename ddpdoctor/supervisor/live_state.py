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
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.model import NS, Call
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.schema import current_entry, iso
from ddpdoctor.rundir.layout import LIVE_STATE_FILE
from ddpdoctor.supervisor.watch import LiveJob, LiveRank
from ddpdoctor.trace import layout as L

SCHEMA = "ddpdoctor.live/1"
PUBLISH_EVERY_S = 0.25  # the live UI polls at 4 Hz


def lowest_seq(ranks: dict[int, LiveRank], group: str, members: list[int]) -> int:
    """The lowest seq the members of ``group`` have reached (-1: one has not called it)."""
    return min((ranks[r].hi.get(group, -1) for r in members if r in ranks), default=-1)


def rank_state(p: LiveRank, ranks: dict[int, LiveRank], now_ns: int,
               hang_timeout: float, lowest: dict[str, int] | None = None,
               call: Call | None = None) -> str:
    """The rank's state from what the supervisor follows live (the report's states: a
    rank inside a call that peers of its group have not reached yet is waiting; the rank
    itself has reached the call, so the group's lowest seq below it means a peer is
    behind).  ``lowest`` caches each group's lowest seq across the ranks of one look."""
    state = p.header.state
    if state == L.RankState.FAILED:
        return "failed"
    if state == L.RankState.EXITED:
        return "exited"
    if p.gone:
        return "exited" if p.exited_clean else "killed"
    if p.stop_logged:
        return "stopped"
    call = call if call is not None else p.oldest_open()
    if call is not None:
        if now_ns - call.t_start >= hang_timeout * NS:
            return "hung"
        lowest = {} if lowest is None else lowest
        if call.group not in lowest:
            members = p.group_ranks.get(call.group) or list(ranks)
            lowest[call.group] = lowest_seq(ranks, call.group, members)
        behind = lowest[call.group] < call.seq
        return "waiting" if behind and call.kind == L.RecordKind.COLLECTIVE else \
            "in_collective"
    return "starting" if state == L.RankState.STARTING else "computing"


def _rank_entry(p: LiveRank, ranks: dict[int, LiveRank], now_ns: int,
                hang_timeout: float, lowest: dict[str, int]) -> dict[str, Any]:
    h, call = p.header, p.oldest_open()
    return {"rank": h.rank, "host": h.host, "pid": h.pid,
            "state": rank_state(p, ranks, now_ns, hang_timeout, lowest, call),
            "exit_code": 0 if h.state == L.RankState.EXITED else h.exit_code,
            "step": max(h.step, 0), "epoch": h.epoch if h.epoch >= 0 else None,
            "last_seq": h.last_seq if h.last_seq >= 0 else None,
            "current": current_entry(call)}


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
        findings, lowest = [], {}
        if sup._warned_mismatch:
            div = live.divergence()
            if div is not None:
                from ddpdoctor.analysis.detectors.mismatch import finding_for

                findings.append(finding_for(div).to_dict())
        return {
            "schema": SCHEMA, "supervisor_pid": os.getpid(), "revision": self.revision, "command": redact_argv(sup.config.command),
            "world_size": max((p.header.world_size for p in ranks.values()), default=None),
            "started_at": iso(sup.started_ns), "hang_timeout": timeout,
            "ranks": [_rank_entry(ranks[r], ranks, now_ns, timeout, lowest)
                      for r in sorted(ranks)],
            "findings": findings, "problems": list(dict.fromkeys(live.problems)),
        }

    def _write(self, text: str) -> None:
        """Replace the file atomically: a reader sees the old state or the new, whole."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode())
        os.replace(tmp, self.path)
