"""The job as analysis sees it: RankRun, JobView, Finding (and Call: the trace's CallRecord)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping, TypeVar

from ddpdoctor.config import wait_bound
from ddpdoctor.kinds import FindingKind, Severity  # noqa: F401 (analysis's names for them)
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import RankTrace
from ddpdoctor.trace.record import CallRecord, as_int

NS = 1_000_000_000
SEVERITIES = frozenset(s.value for s in Severity)
# exit statuses of a rank whose launcher signalled it after its program had returned
CUT_SHORT = (-15, -2, -9, -1)  # SIGTERM, SIGINT, SIGKILL, SIGHUP
K = TypeVar("K", bound=Hashable)


RANK_ITEMS_SHOWN = 10  # ranges or lone ranks written out before the middle is elided


def rank_ranges(ranks: Iterable[int], count: bool = False) -> str:
    """The ranks' numbers in ranges, sorted: three or more in a row are one range
    (``0-6144, 6146-8191``); lone ranks alone read as a list (``0, 2 and 5``); past
    RANK_ITEMS_SHOWN items the middle is elided and the count said
    (``0, 2, 4, 6, 8, 10, 12, 14, …, 8190 (4096 ranks)``), as it is with ``count``
    where a range stands for them (``0-6144, 6146-8191 (8191 ranks)``)."""
    rs = sorted(set(ranks))
    items: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        if j - i >= 2:
            items.append(f"{rs[i]}-{rs[j]}")
        else:
            items.extend(map(str, rs[i:j + 1]))
        i = j + 1
    if not items:
        return "?"
    counted = f" ({len(rs)} ranks)" if count and len(rs) > 2 else ""
    if len(items) > RANK_ITEMS_SHOWN:
        return ", ".join(items[:RANK_ITEMS_SHOWN - 2]) + f", …, {items[-1]} ({len(rs)} ranks)"
    if len(items) == 1 or any("-" in item for item in items):
        return ", ".join(items) + counted
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def ranks_text(ranks: Iterable[int], count: bool = False) -> str:
    """``rank 3``, ``ranks 0 and 2``, ``ranks 0-6144, 6146-8191``: how every finding names
    ranks (``rank_ranges``); with ``count``, a range's rank count follows
    (``ranks 0-6144, 6146-8191 (8191 ranks)``)."""
    rs = sorted(set(ranks))
    return f"{'rank' if len(rs) == 1 else 'ranks'} {rank_ranges(rs, count)}"


RANK_VALUES_SHOWN = 8  # groups of ranks written out with their value before the rest is counted


def ranks_values(values: Mapping[int, object]) -> str:
    """Each rank's value, ranks with the same value as one item (``rank 0: 10, rank 1: 11``;
    ``ranks 0-6144, 6146-8191: 400, rank 6145: 399``); past RANK_VALUES_SHOWN items the
    other ranks are counted (``…, and 8184 more ranks``)."""
    groups = rank_groups({r: str(v) for r, v in values.items()})
    parts = [f"{ranks_text(ranks)}: {value}" for ranks, value in groups[:RANK_VALUES_SHOWN]]
    rest = sum(len(ranks) for ranks, _ in groups[RANK_VALUES_SHOWN:])
    if rest:
        parts.append(f"and {rest} more rank{'s' if rest != 1 else ''}")
    return ", ".join(parts)


def rank_groups(keys: Mapping[int, K]) -> list[tuple[tuple[int, ...], K]]:
    """Ranks grouped by what they do (as STAT groups processes by stack): the ranks whose
    key is equal make one group, in the order of each group's lowest rank."""
    groups: dict[K, list[int]] = {}
    for rank in sorted(keys):
        groups.setdefault(keys[rank], []).append(rank)
    return [(tuple(ranks), key) for key, ranks in groups.items()]


@dataclass(frozen=True)
class Finding:
    """One diagnosis, serialised as a report's ``findings[i]``.

    kind: a finding kind of the contract (collective_mismatch, rank_failed, ...).
    severity: error (the job is broken), warning (it trains wrong or slow), info.
    ranks: the ranks at fault where that can be told, else every rank involved.
    seq: position in the rank's collective sequence on the group, or None.
    summary: one line. detail: what happened, with evidence. fix: what to change.
    evidence: machine-readable facts behind the finding.
    """

    kind: str
    severity: Severity
    ranks: tuple[int, ...]
    seq: int | None
    summary: str
    detail: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)
    caused_by: int | None = None  # index of the root cause's finding in the same list

    def to_dict(self) -> dict[str, Any]:
        return {"kind": str(getattr(self.kind, "value", self.kind)),
                "severity": self.severity.value, "ranks": list(self.ranks),
                "seq": self.seq, "summary": self.summary, "detail": self.detail,
                "fix": self.fix, "evidence": self.evidence, "caused_by": self.caused_by}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """A finding as ``to_dict`` wrote it (a report's ``findings[i]``), read forgivingly:
        a field of the wrong type reads as unknown, an unknown severity as info."""
        def text(key: str) -> str:
            value = data.get(key)
            return value if isinstance(value, str) else ""

        ranks, evidence = data.get("ranks"), data.get("evidence")
        severity = text("severity")
        return cls(text("kind") or "finding",
                   Severity(severity) if severity in SEVERITIES else Severity.INFO,
                   tuple(r for r in map(as_int, ranks) if r is not None)
                   if isinstance(ranks, list) else (),
                   as_int(data.get("seq")), text("summary"), text("detail"), text("fix"),
                   evidence if isinstance(evidence, dict) else {},
                   as_int(data.get("caused_by")))


Call = CallRecord  # the analysis's name for the one record type of an event (trace/record.py)


@dataclass
class RankRun:
    """One rank: its trace, its calls by group, and how its process ended."""

    rank: int
    trace: RankTrace
    calls: dict[str, list[Call]]  # group name -> collectives in seq order
    p2p: list[Call]
    ring_steps: list[CallRecord]
    batches: list[CallRecord]
    group_ranks: dict[str, list[int]]
    alive: bool | None = None  # None: not known (offline)
    proc_state: str = ""  # kernel state letter when alive (T = stopped)
    returncode: int | None = None  # from the launcher (negative: killed by that signal)
    gone_at_ns: int | None = None  # when the supervisor saw the process vanish
    fault: str = ""  # faulthandler's dump after a fatal signal
    stack: list[dict[str, Any]] | None = None
    stack_error: str | None = None
    seq_known: bool = True  # False: known from stacks alone (attach): its seqs are relative
    marks: list[CallRecord] = field(default_factory=list)  # init / new_group / destroy
    progress_ns: int | None = None  # live: wall time of the last observed progress
    cpu_busy: bool | None = None  # live: CPU time advanced in the last sampling window
    stop_ns: int | None = None  # when ddpdoctor stopped this rank's node (its own clock)
    flow: Any = None  # its recorded control flow (load/flow.py RankFlow), None on Python < 3.12
    # its child processes' stacks (DataLoader workers), as (pid, frames innermost first)
    children: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.trace.header.pid

    @property
    def header(self) -> Any:
        return self.trace.header

    def exception(self) -> dict[str, Any] | None:
        """The uncaught exception of the main thread, else of any thread."""
        found = self.trace.meta_events("exception")
        main = [e for e in found if e.get("thread") == "main"]
        return (main or found or [None])[-1]

    def default_group(self) -> str:
        """The name of the default (world) process group in this rank's trace."""
        for g in self.trace.groups().values():
            if g.get("default"):
                return str(g.get("name"))
        return "0"

    def last_seq(self) -> int | None:
        """The seq of the rank's last collective on the default group."""
        last = self.last_call(self.default_group())
        return last.seq if last is not None else None

    def last_call(self, group: str) -> Call | None:
        calls = self.calls.get(group)
        return calls[-1] if calls else None

    def open_call(self) -> Call | None:
        """The collective (or p2p) this rank is inside now, the newest first."""
        candidates = [c for calls in self.calls.values() for c in calls[-4:] if c.open]
        candidates += [c for c in self.p2p[-16:] if c.open]
        return max(candidates, key=lambda c: c.t_start) if candidates else None

    def exited_cleanly(self) -> bool:
        """Its program returned: the header says EXITED, no exception, no fatal signal; a
        launcher's SIGTERM (or SIGINT, SIGKILL) after that only cut its teardown short."""
        return (self.header.state == L.RankState.EXITED and not self.exception()
                and not self.fault and (self.returncode in (None, 0) or
                                        self.returncode in CUT_SHORT))


@dataclass(frozen=True)
class NodeFacts:
    """What node 0 knew of another node: its host, how far its clock runs ahead of node
    0's (``skew_ns``, measured through the store), and whether it was lost."""

    node: str
    host: str
    skew_ns: int | None = None
    lost: bool = False
    lost_at_ns: int | None = None  # node 0's clock


@dataclass
class JobView:
    """All ranks of a job at one moment (live) or after it ended (offline)."""

    run_dirs: list[Path]
    ranks: dict[int, RankRun]
    world_size: int
    now_ns: int
    hang_timeout: float
    live: bool
    launchers: list[RankTrace] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    supervisor_events: list[dict[str, Any]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    outcome: str | None = None  # completed | failed | hung once known
    started_ns: int | None = None  # when `ddpdoctor run` started the job (run.json)
    ended_ns: int | None = None  # offline: when the job ended (the supervisor's last word)
    big: bool = False  # only each rank's newest records were loaded: match with analysis.fast
    dumps_alone: bool = False  # known from flight recorder dumps alone: no process, no clock
    nodes: dict[str, NodeFacts] = field(default_factory=dict)  # other nodes, by host
    # lines lint flagged before the run as a collective reached on some ranks only:
    # (file basename, line) -> lint's kind (rundir/lint_results.py)
    lint_sites: dict[tuple[str, int], str] = field(default_factory=dict)
    # how long ranks may wait on a rank working outside any collective (config.wait_bound)
    wait_bound: float | None = None

    @property
    def bound(self) -> float:
        return wait_bound(self.hang_timeout, self.wait_bound)

    def group_members(self, group: str) -> list[int]:
        for run in self.ranks.values():
            if group in run.group_ranks and run.group_ranks[group]:
                return list(run.group_ranks[group])
        return sorted(self.ranks)

    def groups(self) -> list[str]:
        names: set[str] = set()
        for run in self.ranks.values():
            names.update(run.calls)
        return sorted(names, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))

    def notices(self) -> dict[str, list[int]]:
        """The ranks' ``notice`` meta events: each text once, with the ranks that said it."""
        by_text: dict[str, list[int]] = {}
        for rank in sorted(self.ranks):
            for ev in self.ranks[rank].trace.meta_events("notice"):
                ranks = by_text.setdefault(str(ev.get("text", "")), [])
                if rank not in ranks:
                    ranks.append(rank)
        return by_text
