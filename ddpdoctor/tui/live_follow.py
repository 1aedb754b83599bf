"""LiveFollower: a live run's report from the supervisor's live.json and the traces' new records.

The supervisor publishes its live view of the job (RUN_DIR/live.json, replaced atomically);
this reads it again only when its mtime changes, reads only the records each rank appended
since the last poll (for the timeline, the ranks' recent calls and the profile), and builds
the full report only when the supervisor's revision says something worth judging changed
(at most every FULL_BUILD_EVERY_S).  No supervisor (live.json missing, or its writer gone):
``poll`` returns None and the caller builds the report from the run dir as before.
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.rundir.layout import LIVE_STATE_FILE
from ddpdoctor.trace import layout as L
from ddpdoctor.report.schema import timeline_entry
from ddpdoctor.trace.record import CallRecord
from ddpdoctor.trace.reader import TraceError, TraceFile, record_of
from ddpdoctor.trace.tail import TailView, TraceTail
from ddpdoctor.rundir.bounded import BadInput, load_json, read_file

MAX_LIVE_STATE_BYTES = 256 << 20  # the supervisor's live view of the biggest job

LIVE_SCHEMA = "ddpdoctor.live/1"
REPORT_SCHEMA = "ddpdoctor.report/1"
FULL_BUILD_EVERY_S = 5.0  # findings, waits and stacks: rebuilt at most this often
DISCOVER_EVERY_S = 2.0  # between looks for new trace files
TIMELINE_LEN = 200  # as report.json: each rank's last calls, fewer past MANY_RANKS ranks
MANY_RANKS = 64
TIMELINE_LEN_MANY = 16
RECENT_LEN = 20
_TIMELINE_KINDS = (int(L.RecordKind.COLLECTIVE), int(L.RecordKind.P2P))
NS = 1_000_000_000


def _entry(rec: CallRecord, group: str) -> dict[str, Any]:
    """A timeline entry as report.json writes it (the iteration is not followed live)."""
    return {**timeline_entry(rec), "group": group}


class RankTail(TailView):
    """One process's trace: the calls it appended since the last poll, kept up to ``keep``."""

    def __init__(self, path: Path, keep: int) -> None:
        self.tail = TraceTail(TraceFile(path), max_new=(keep or 1) * 4)
        self.entries: deque[dict[str, Any]] = deque(maxlen=keep)

    def poll(self) -> bool:
        """Read what was appended and what returned since the last poll; True if any."""
        tail = self.tail
        changed = self._close_returned()
        if not tail.grew():
            return changed
        tail.refresh()
        for index, v in tail.new_records(_TIMELINE_KINDS):
            rec = record_of(v, index)
            if rec is None:
                continue
            entry = _entry(rec, tail.group(rec.group_index))
            self.entries.append(entry)
            if entry["end"] is None:
                tail.open[index] = entry
        return True

    def _close_returned(self) -> bool:
        """Give open entries their end once their record has one (an entry whose slot the
        ring reused keeps none)."""
        returned = self.tail.returned()
        for entry, t_end in returned:
            if t_end:
                entry["end"] = t_end / NS
        return bool(returned)


class LiveFollower:
    """Follows one live run dir (see the module docstring).

    Args:
        build: builds the full report of a run dir (today's path, used for findings,
            waits and stacks when the supervisor's revision changes).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, build: Callable[[Path], dict[str, Any]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.build = build
        self.clock = clock
        self.builds = 0
        self._run_dir: Path | None = None
        self._reset()

    def _reset(self) -> None:
        """Forget what was followed (a restarted job's next attempt is another run dir)."""
        self._state: dict[str, Any] | None = None
        self._state_mtime = 0
        self._tails: dict[Path, RankTail] = {}
        self._bad: set[Path] = set()
        self._next_discover = 0.0
        self._full: dict[str, Any] | None = None
        self._full_revision: Any = None
        self._next_build = 0.0
        self._report: dict[str, Any] | None = None

    def poll(self, run_dir: Path) -> dict[str, Any] | None:
        """The live report, the same dict object as last time when nothing changed; None
        when no supervisor publishes a live state for ``run_dir``."""
        if run_dir != self._run_dir:
            self._reset()
            self._run_dir = run_dir
        changed = self._read_state(run_dir)
        state = self._state
        if state is None:
            return None
        changed |= self._poll_traces(run_dir, len(state.get("ranks") or ()))
        changed |= self._maybe_build(run_dir, state)
        if changed or self._report is None:
            self._report = self._merge(run_dir, state)
        return self._report

    def _read_state(self, run_dir: Path) -> bool:
        path = run_dir / LIVE_STATE_FILE
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            self._state = None
            return False
        if mtime == self._state_mtime and self._state is not None:
            return not self._supervisor_alive()  # gone since: fall back
        try:
            state = load_json(read_file(path, MAX_LIVE_STATE_BYTES), path)
        except BadInput as e:
            if not e.damaged:
                raise  # a FIFO, a device, a link: shown as the UI's error
            return False  # replaced as we read it: the next poll reads it
        except OSError:
            return False
        self._state_mtime = mtime
        ok = isinstance(state, dict) and state.get("schema") == LIVE_SCHEMA
        self._state = state if ok else None
        if self._state is not None and not self._supervisor_alive():
            self._state = None
        return True

    def _supervisor_alive(self) -> bool:
        pid = self._state.get("supervisor_pid") if self._state is not None else None
        if type(pid) is not int or pid <= 0:
            self._state = None
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self._state = None
            return False
        except PermissionError:
            return True
        return True

    def _poll_traces(self, run_dir: Path, ranks: int) -> bool:
        now = self.clock()
        if now >= self._next_discover:
            self._next_discover = now + DISCOVER_EVERY_S
            keep = TIMELINE_LEN if ranks <= MANY_RANKS else TIMELINE_LEN_MANY
            for path in (run_dir / "traces").glob("pid-*.ring"):
                if path in self._tails or path in self._bad:
                    continue
                try:
                    self._tails[path] = RankTail(path, keep)
                except (TraceError, OSError, ValueError):
                    self._bad.add(path)
        changed = False
        for path, tail in list(self._tails.items()):
            try:
                changed |= tail.poll()
            except (TraceError, OSError, ValueError, IndexError):
                self._bad.add(path)  # its last good entries stay shown
                del self._tails[path]
                changed = True
        return changed

    def _maybe_build(self, run_dir: Path, state: dict[str, Any]) -> bool:
        """The full report, for findings, waits and stacks, when the revision changed."""
        revision = state.get("revision")
        if revision == self._full_revision or revision in (0, None) or \
                self.clock() < self._next_build:
            return False
        self._next_build = self.clock() + FULL_BUILD_EVERY_S
        self._full_revision = revision
        self.builds += 1
        self._full = self.build(run_dir)
        return True

    def _timeline(self) -> dict[int, list[dict[str, Any]]]:
        """Rank -> its calls, from its newest process (a restarted rank replaces the old)."""
        newest: dict[int, RankTail] = {}
        for tail in self._tails.values():
            r = tail.header.rank
            if r >= 0 and (r not in newest or
                           tail.header.started_ns > newest[r].header.started_ns):
                newest[r] = tail
        return {r: list(t.entries) for r, t in sorted(newest.items())}

    def _merge(self, run_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
        """A report dict: the supervisor's ranks and states, the traces' recent calls, and
        the last full build's findings, waits and stacks."""
        full = self._full or {}
        timeline = self._timeline()
        stacks = {r.get("rank"): r for r in full.get("ranks") or () if isinstance(r, dict)}
        recent_len = RECENT_LEN if len(timeline) <= MANY_RANKS else TIMELINE_LEN_MANY // 2
        ranks = []
        for entry in state.get("ranks") or ():
            if not isinstance(entry, dict):
                continue
            built = stacks.get(entry.get("rank"), {})
            ranks.append({**entry, "stack": built.get("stack"),
                          "stack_error": built.get("stack_error", ""),
                          "recent": timeline.get(entry.get("rank"), [])[-recent_len:]})
        now = time.time()
        return {
            "schema": REPORT_SCHEMA, "outcome": "", "live": True, "run_dir": str(run_dir),
            "command": state.get("command") or [], "world_size": state.get("world_size"),
            "started_at": state.get("started_at"), "ranks": ranks,
            "findings": full.get("findings", state.get("findings") or []),
            "waits": full.get("waits") or [],
            "timeline": {str(r): entries for r, entries in timeline.items()},
            "profile": {str(r): profile(entries, now) for r, entries in timeline.items()},
            "problems": list(dict.fromkeys([*(state.get("problems") or []),
                                            *(full.get("problems") or [])])),
            "notices": full.get("notices") or [],
        }


def profile(entries: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """Time computing vs waiting in collectives over the entries' span (as report.json)."""
    if not entries:
        return {"compute_s": 0.0, "wait_s": 0.0, "collectives": 0}
    wait = sum((e["end"] or now) - e["start"] for e in entries)
    span = max((e["end"] or now) for e in entries) - entries[0]["start"]
    return {"compute_s": round(max(0.0, span - wait), 6), "wait_s": round(wait, 6),
            "collectives": len(entries)}
