"""LiveJob: follows every rank's trace incrementally while the job runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.analysis.matcher import Divergence, blame, compare, fingerprint, MatchState
from ddpdoctor.analysis.model import NS, Call
from ddpdoctor.launch.process import alive, proc_state
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import (TraceError, TraceFile, TraceHeader, decode_record,
                                    meta_path_for, read_meta)

WINDOW = 4096  # collectives kept per rank and group for live matching
MAX_NEW_PER_POLL = 8192


@dataclass
class LiveRank:
    """One process's trace, read incrementally."""

    file: TraceFile
    header: TraceHeader
    read_upto: int = 0  # records [0, read_upto) have been read
    groups: dict[int, str] = field(default_factory=dict)
    group_ranks: dict[str, list[int]] = field(default_factory=dict)
    calls: dict[str, dict[int, Call]] = field(default_factory=dict)  # group -> seq -> call
    open: dict[int, Call] = field(default_factory=dict)  # record index -> open call
    gone: bool = False
    exited_clean: bool = False

    @property
    def rank(self) -> int:
        return self.header.rank

    def _refresh_groups(self) -> None:
        events, _ = read_meta(meta_path_for(self.file.path))
        for g in events:
            if g.get("event") == "group" and isinstance(g.get("index"), int):
                name = str(g.get("name", g["index"]))
                self.groups[g["index"]] = name
                if isinstance(g.get("ranks"), list):
                    self.group_ranks[name] = [r for r in g["ranks"] if isinstance(r, int)]

    def poll(self) -> None:
        """Read the header, new records, and whether open calls have returned."""
        self.header = self.file.header()
        h = self.header
        cap = h.capacity
        start = max(self.read_upto, h.count - cap, h.count - MAX_NEW_PER_POLL)
        buf = self.file._map
        for index in range(start, h.count):
            rec = decode_record(buf, L.HEADER_SIZE + (index % cap) * L.RECORD_SIZE, index)
            if rec is None or rec.kind not in (L.RecordKind.COLLECTIVE, L.RecordKind.P2P):
                continue
            if rec.group not in self.groups:
                self._refresh_groups()
            call = Call.from_record(h.rank, self.groups.get(rec.group, str(rec.group)), rec)
            if rec.kind == L.RecordKind.COLLECTIVE:
                seqs = self.calls.setdefault(call.group, {})
                seqs[call.seq] = call
                if len(seqs) > WINDOW:
                    del seqs[min(seqs)]
            if call.open:
                self.open[index] = call
        self.read_upto = h.count
        for index in list(self.open):
            rec = decode_record(buf, L.HEADER_SIZE + (index % cap) * L.RECORD_SIZE, index)
            if rec is None or not rec.open:
                call = self.open.pop(index)
                if rec is not None and call.kind == L.RecordKind.COLLECTIVE:
                    self.calls.get(call.group, {})[call.seq] = Call.from_record(
                        h.rank, call.group, rec)

    def oldest_open(self) -> Call | None:
        return min(self.open.values(), key=lambda c: c.t_start) if self.open else None


class LiveJob:
    """Every rank of the running job: discovery, polling, hang and mismatch checks."""

    def __init__(self, run_dir: Path):
        self.trace_dir = run_dir / "traces"
        self.procs: dict[Path, LiveRank] = {}
        self.bad: set[Path] = set()
        self.problems: list[str] = []
        self.verified: dict[str, int] = {}  # group -> seqs below this matched on all ranks

    def discover(self) -> None:
        for path in self.trace_dir.glob("pid-*.ring"):
            if path in self.procs or path in self.bad:
                continue
            try:
                f = TraceFile(path)
                self.procs[path] = LiveRank(f, f.header())
            except FileNotFoundError:
                continue
            except (TraceError, OSError, ValueError) as e:
                self.bad.add(path)
                self.problems.append(str(e))

    def poll(self) -> None:
        self.discover()
        for proc in self.procs.values():
            try:
                proc.poll()
            except (TraceError, ValueError, IndexError) as e:
                self.problems.append(f"{proc.file.path.name}: {e}")

    def ranks(self) -> dict[int, LiveRank]:
        """Rank -> its newest process (a restarted rank replaces the old one)."""
        out: dict[int, LiveRank] = {}
        for p in self.procs.values():
            r = p.header.rank
            if r >= 0 and (r not in out or p.header.started_ns > out[r].header.started_ns):
                out[r] = p
        return out

    def pids(self) -> list[int]:
        return [p.header.pid for p in self.ranks().values()]

    def check_processes(self) -> list[LiveRank]:
        """Ranks that vanished since the last call (each reported once)."""
        gone = []
        for p in self.ranks().values():
            if p.gone:
                continue
            if not alive(p.header.pid):
                p.gone = True
                p.exited_clean = p.header.state == L.RankState.EXITED
                gone.append(p)
        return gone

    def stopped(self) -> list[LiveRank]:
        return [p for p in self.ranks().values() if not p.gone and
                proc_state(p.header.pid) == "T"]

    def longest_wait(self) -> tuple[LiveRank, Call, float] | None:
        """The rank inside one collective for the longest time now."""
        now = time.time_ns()
        best = None
        for p in self.ranks().values():
            if p.gone:
                continue
            call = p.oldest_open()
            if call is not None:
                waited = (now - call.t_start) / NS
                if best is None or waited > best[2]:
                    best = (p, call, waited)
        return best

    def divergence(self) -> Divergence | None:
        """The first mismatch among the collectives recorded so far.  Incremental: seqs that
        every member rank recorded identically are never compared again."""
        ranks = self.ranks()
        groups = {g for p in ranks.values() for g in p.calls}
        for group in sorted(groups):
            holders = {r: p.calls[group] for r, p in ranks.items() if group in p.calls}
            if len(holders) < 2:
                continue
            members = next((p.group_ranks[group] for p in ranks.values()
                            if p.group_ranks.get(group)), list(holders))
            lo = max(self.verified.get(group, 0),
                     max(min(seqs) for seqs in holders.values() if seqs))
            hi = max(max(seqs) for seqs in holders.values() if seqs)
            contiguous = True
            for seq in range(lo, hi + 1):
                at = {r: seqs[seq] for r, seqs in holders.items() if seq in seqs}
                if len(at) >= 2 and len({fingerprint(c) for c in at.values()}) > 1:
                    culprits, majority = blame(at)
                    ref = at[majority[0]] if majority else at[min(at)]
                    state = next((compare(ref, c) for c in at.values()
                                  if compare(ref, c) != MatchState.MATCH),
                                 MatchState.OP_MISMATCH)
                    return Divergence(group, seq, dict(sorted(at.items())), state, culprits,
                                      majority)
                if contiguous and len(at) == len(members):
                    self.verified[group] = seq + 1
                else:
                    contiguous = False
        return None

    def abandoned(self) -> tuple[LiveRank, Call, list[int]] | None:
        """A rank waiting at a seq that an exited rank of its group never reached."""
        ranks = self.ranks()
        exited = {r: p for r, p in ranks.items() if p.gone and p.exited_clean}
        if not exited:
            return None
        for p in ranks.values():
            call = None if p.gone else p.oldest_open()
            if call is None or call.kind != L.RecordKind.COLLECTIVE:
                continue
            members = p.group_ranks.get(call.group) or list(ranks)
            missing = [r for r, q in exited.items() if r in members and
                       max(q.calls.get(call.group, {-1: None}), default=-1) < call.seq]
            if missing:
                return p, call, missing
        return None
