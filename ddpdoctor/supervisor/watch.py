"""LiveJob: follows every rank's trace incrementally while the job runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.analysis.align.matcher import Divergence, find_divergence, fingerprint
from ddpdoctor.analysis.model import NS, Call
from ddpdoctor.proc.table import alive, proc_state
from ddpdoctor.rundir.nodes import node_dirs
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.record import filled
from ddpdoctor.trace.reader import TraceError, TraceFile, decode_fields
from ddpdoctor.trace.tail import TailView, TraceTail
from ddpdoctor.rundir.bounded import BadInput

WINDOW = 4096  # collectives kept per rank and group for live matching
MAX_NEW_PER_POLL = 8192
DISCOVER_EVERY = 5  # polls between looks for new trace files
_WATCHED_KINDS = (int(L.RecordKind.COLLECTIVE), int(L.RecordKind.P2P), int(L.RecordKind.MARK))
_RENDEZVOUS_OPS = (L.OPS.index("init"), L.OPS.index("new_group"))
_KIND_MARK = int(L.RecordKind.MARK)
_STARTING = L.RankState.STARTING  # until init returns the header changes without records
_KIND_COLLECTIVE = int(L.RecordKind.COLLECTIVE)


_decoded: dict[tuple, tuple] = {}  # record fields -> what they decode to


def live_call(rank: int, group: str, v: tuple) -> Call:
    """A Call from a record's raw fields; what its kind, op, reduce op, peer and text
    decode to (and its fingerprint) is looked up: the supervisor sees the same few calls
    thousands of times."""
    key = (v[1], v[2], v[3], v[4], v[10], v[14])
    known = _decoded.get(key)
    if known is None:
        ins, outs, dtypes, callsite, framework_site, code = decode_fields(v[14])
        op = L.OPS[v[2]] if v[2] < len(L.OPS) else f"code{v[2]}"
        reduce_op = L.REDUCE_OPS[v[3]] if v[3] < len(L.REDUCE_OPS) else f"code{v[3]}"
        known = (op, reduce_op, ins, outs, dtypes, callsite, L.RecordKind(v[1]),
                 framework_site, Origin.of(code, op, v[4]), None)
    op, reduce_op, ins, outs, dtypes, callsite, kind, framework_site, origin, fp = known
    call = filled(rank=rank, group=group, group_index=v[5], seq=v[6], op=op,
                  reduce_op=reduce_op, in_shapes=ins, out_shapes=outs, dtypes=dtypes,
                  peer=v[10], flags=v[4], callsite=callsite, t_start=v[7], t_end=v[8],
                  aux=v[11], kind=kind, framework_site=framework_site, origin=origin,
                  index=v[0] - 1, numel=v[9], nbytes=v[12], parent=v[13], iteration=-1)
    if fp is None:
        if len(_decoded) > 4096:
            _decoded.clear()
        _decoded[key] = (*known[:-1], fingerprint(call))
    else:
        call.__dict__["fingerprint"] = fp  # fills matcher.fingerprint's cache
    return call


@dataclass
class LiveRank(TailView):
    """One process's trace, read incrementally: its collectives by group and seq, and the
    calls it is inside now."""

    tail: TraceTail
    calls: dict[str, dict[int, Call]] = field(default_factory=dict)  # group -> seq -> call
    lo: dict[str, int] = field(default_factory=dict)  # group -> lowest seq kept
    hi: dict[str, int] = field(default_factory=dict)  # group -> highest seq seen
    gone: bool = False
    exited_clean: bool = False
    stop_logged: bool = False  # the supervisor has said this rank is SIGSTOPped
    remote: bool = False  # another node's rank, read from node 0's copy of its trace

    @property
    def rank(self) -> int:
        return self.tail.header.rank

    def poll(self) -> None:
        """Read the header, new records, and whether open calls have returned.  A rank
        with nothing new costs one 8-byte read."""
        tail = self.tail
        h = tail.header
        if not tail.grew() and h.rank >= 0 and h.state != _STARTING:
            if tail.open:
                tail.returned()
            return
        rank = tail.refresh().rank
        group, opened = tail.group, tail.open
        for index, v in tail.new_records(_WATCHED_KINDS):  # ring steps, batches: not matched
            if v[1] == _KIND_MARK and v[2] not in _RENDEZVOUS_OPS:
                continue  # only init / new_group marks are waits
            call = live_call(rank, group(v[5]), v)
            if v[1] == _KIND_COLLECTIVE:
                self._keep(call)
            if call.open:
                opened[index] = call
        tail.returned()

    def is_open(self, call: Call) -> bool:
        """Is ``call`` (as first read) still inside its collective?"""
        return any(c is call for c in self.open.values())

    def _keep(self, call: Call) -> None:
        """Add a collective to its group's window of recent seqs."""
        group, seq = call.group, call.seq
        seqs = self.calls.setdefault(group, {})
        seqs[seq] = call
        if seq > self.hi.get(group, -1):
            self.hi[group] = seq
        lo = self.lo.get(group)
        if lo is None or seq < lo:
            self.lo[group] = lo = seq
        while len(seqs) > WINDOW:  # the next seq up, else the lowest kept (a damaged
            seqs.pop(lo, None)  # seq far off must not cost a step per missing seq)
            lo = lo + 1 if lo + 1 in seqs else min(seqs)
            self.lo[group] = lo

    def oldest_open(self) -> Call | None:
        return min(self.open.values(), key=lambda c: c.t_start) if self.open else None


def _between(seqs: dict[int, Call], lo: int, hi: int) -> list[Call]:
    """The calls of seqs lo..hi in order: by the range when it is the shorter (the usual
    unverified tail), else by the window (a damaged seq far off makes the range huge)."""
    if hi - lo < len(seqs):
        return [seqs[q] for q in range(lo, hi + 1) if q in seqs]
    return [seqs[q] for q in sorted(seqs) if lo <= q <= hi]


class LiveJob:
    """Every rank of the running job: discovery, polling, and the cheap incremental facts
    (open calls, a first divergence) that tell the supervisor when to ask the causal model."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.trace_dir = run_dir / "traces"
        self.procs: dict[Path, LiveRank] = {}
        self.bad: set[Path] = set()
        self.problems: list[str] = []
        self.verified: dict[str, int] = {}  # group -> seqs below this matched on all ranks
        self._polls = 0

    def discover(self) -> None:
        mirrored = [(p, True) for m in node_dirs(self.run_dir)
                    for p in (m / "traces").glob("pid-*.ring")]
        for path, remote in [(p, False) for p in self.trace_dir.glob("pid-*.ring")] + mirrored:
            if path in self.procs or path in self.bad:
                continue
            try:
                tail = TraceTail(TraceFile(path), max_new=MAX_NEW_PER_POLL)
                self.procs[path] = LiveRank(tail, remote=remote)
            except FileNotFoundError:
                continue
            except (TraceError, BadInput, OSError, ValueError) as e:  # a FIFO planted there too
                self.bad.add(path)
                self.problems.append(str(e))

    def poll(self) -> None:
        self._polls += 1
        if self._polls % DISCOVER_EVERY == 1 or not self.procs:
            self.discover()
        for proc in self.procs.values():
            if proc.file.path in self.bad:
                continue
            try:
                proc.poll()
            except (TraceError, BadInput, ValueError, IndexError) as e:
                self.bad.add(proc.file.path)  # said once; its last good state is kept
                self.problems.append(f"{proc.file.path.name}: {e}")

    def ranks(self) -> dict[int, LiveRank]:
        """Rank -> its newest process (a restarted rank replaces the old one)."""
        out: dict[int, LiveRank] = {}
        for p in self.procs.values():
            r = p.header.rank
            if r >= 0 and (r not in out or p.header.started_ns > out[r].header.started_ns):
                out[r] = p
        return out

    def local_ranks(self) -> dict[int, LiveRank]:
        """The ranks of this node (their pids are this host's)."""
        return {r: p for r, p in self.ranks().items() if not p.remote}

    def pids(self) -> list[int]:
        return [p.header.pid for p in self.local_ranks().values()]

    def check_processes(self) -> list[LiveRank]:
        """Ranks that vanished since the last call (each reported once); another node's
        rank is gone when its copied header says it ended."""
        gone = []
        for p in self.ranks().values():
            if p.gone:
                continue
            if p.remote:
                if p.header.state in (L.RankState.EXITED, L.RankState.FAILED):
                    p.gone, p.exited_clean = True, p.header.state == L.RankState.EXITED
                    gone.append(p)
                continue
            if not alive(p.header.pid):
                p.gone = True
                try:  # its last words (EXITED) may have come after the last poll
                    p.header = p.file.header()
                except (TraceError, BadInput, ValueError, OSError):
                    pass
                p.exited_clean = p.header.state == L.RankState.EXITED
                gone.append(p)
        return gone

    def stopped(self) -> list[LiveRank]:
        return [p for p in self.local_ranks().values() if not p.gone and
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

    def steady(self, wait_s: float) -> bool:
        """Every rank known is running (started, not ended) and none has been inside one
        call for ``wait_s`` or longer."""
        ranks = self.ranks().values()
        if not ranks or any(p.gone or p.header.state != L.RankState.COMPUTING for p in ranks):
            return False
        longest = self.longest_wait()
        return longest is None or longest[2] < wait_s

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
            lo = max([self.verified.get(group, 0)] +
                     [ranks[r].lo[group] for r in holders if holders[r]])
            hi = max(ranks[r].hi[group] for r in holders if holders[r])
            div = find_divergence({r: _between(seqs, lo, hi) for r, seqs in holders.items()},
                                  group, lo)
            if div is not None:
                return div
            seq = lo  # seqs every member recorded: never compared again
            while seq <= hi and sum(1 for seqs in holders.values() if seq in seqs) >= \
                    len(members):
                seq += 1
            if seq > lo:
                self.verified[group] = seq
        return None
