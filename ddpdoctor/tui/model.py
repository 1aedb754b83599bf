"""Typed, forgiving views of a report dict (schema ddpdoctor.report/1 plus the UI extensions)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ddpdoctor.analysis.model import Finding
from ddpdoctor.report.transports import transport_line
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.record import NS, CallRecord
from ddpdoctor.tui.styles import SEVERITY_ORDER
from ddpdoctor.tui.values import as_dict, as_float, as_int, as_list, as_str, parse_time
from ddpdoctor.terminal_text import safe_value


@dataclass(frozen=True)
class Frame:
    """One stack frame as py-spy reports it."""

    name: str
    filename: str
    line: int | None

    @property
    def is_library(self) -> bool:
        """True for torch, site-packages and standard-library frames."""
        path = self.filename.replace("\\", "/")
        markers = (
            "/site-packages/",
            "/dist-packages/",
            "/torch/",
            "/lib/python",
            "<frozen",
        )
        return path.startswith("<") or self.is_ddpdoctor or any(m in path for m in markers)

    @property
    def is_ddpdoctor(self) -> bool:
        """A frame of ddpdoctor's own package (its patches, recorder, DDP hook), wherever it is
        installed: ``.../ddpdoctor/<one of its modules>``; never the user's code, even in a
        checkout named ddpdoctor."""
        path = self.filename.replace("\\", "/")
        _, sep, tail = path.rpartition("/ddpdoctor/")
        return bool(sep) and tail.split("/", 1)[0] in OWN_MODULES

    @property
    def location(self) -> str:
        return f"{self.filename}:{self.line}" if self.line is not None else self.filename


def _own_modules() -> frozenset[str]:
    """The names directly inside ddpdoctor's package directory (subpackages and modules)."""
    import ddpdoctor

    root = Path(ddpdoctor.__file__).resolve().parent
    return frozenset(p.name for p in root.iterdir() if p.name != "__pycache__")


OWN_MODULES = _own_modules()

# How the UI names the API that issued a collective the user never wrote.
ORIGIN_LABELS = {Origin.DDP_FORWARD: "DDP forward", Origin.DDP_BACKWARD: "DDP backward",
                 Origin.DDP_INIT: "DDP construction", Origin.ZERO: "ZeRO",
                 Origin.SYNC_BN: "SyncBatchNorm", Origin.OBJECT: "object collective",
                 Origin.JOIN: "Join", Origin.FRAMEWORK: "framework helper"}


def origin_label(entry: CallRecord) -> str:
    """``DDP forward`` for a collective an API issued; "" for the user's own call."""
    return ORIGIN_LABELS.get(entry.origin, "")


def in_flight(entry: CallRecord) -> bool:
    """Started and not returned."""
    return entry.t_start != 0 and entry.t_end == 0


def seq_of(entry: CallRecord) -> int | None:
    return entry.seq if entry.seq >= 0 else None


def start_of(entry: CallRecord) -> float | None:
    """When it started, unix seconds (None: not known)."""
    return entry.t_start / NS if entry.t_start else None


def end_of(entry: CallRecord) -> float | None:
    """When it returned, unix seconds (None: not yet, or not known)."""
    return entry.t_end / NS if entry.t_end else None


def shapes_text(entry: CallRecord) -> str:
    """`10x4,3`; a 0-d tensor is `scalar`; empty when unknown."""
    return ",".join("x".join(map(str, s)) if s else "scalar" for s in entry.in_shapes)


def dtypes_text(entry: CallRecord) -> str:
    return ",".join(entry.dtypes)


@dataclass(frozen=True)
class RankView:
    """What the UI shows of one rank."""

    rank: int
    host: str = ""
    pid: int | None = None
    state: str = "starting"
    exit_code: int | None = None
    step: int | None = None
    epoch: int | None = None
    last_seq: int | None = None
    current: CallRecord | None = None
    stack: tuple[Frame, ...] | None = None
    stack_error: str = ""
    recent: tuple[CallRecord, ...] = ()
    blocked_on: str = ""  # the system call an idle rank waits in ("futex"), as the OS said

    @property
    def user_frame(self) -> Frame | None:
        """The innermost frame of the user's code in its stack, if any."""
        return next((f for f in self.stack or () if not f.is_library), None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], index: int, parser: CollectiveParser | None = None) -> RankView:
        current = data.get("current")
        stack = data.get("stack")
        frames = None
        if isinstance(stack, list):
            frames = tuple(
                Frame(
                    name=as_str(f.get("name")) or "?",
                    filename=as_str(f.get("filename")) or "?",
                    line=as_int(f.get("line")),
                )
                for f in stack
                if isinstance(f, dict)
            )
        rank = as_int(data.get("rank"))
        return cls(
            rank=rank if rank is not None else index,
            host=as_str(data.get("host")) or "",
            pid=as_int(data.get("pid")),
            state=as_str(data.get("state")) or "starting",
            exit_code=as_int(data.get("exit_code")),
            step=as_int(data.get("step")),
            epoch=as_int(data.get("epoch")),
            last_seq=as_int(data.get("last_seq")),
            current=CallRecord.from_report_dict(current) if isinstance(current, dict) else None,
            stack=frames,
            stack_error=as_str(data.get("stack_error")) or "",
            recent=(parser or CollectiveParser()).entries(as_list(data.get("recent"))),
            blocked_on=as_str((data.get("blocked_on") or {}).get("syscall")
                              if isinstance(data.get("blocked_on"), dict) else None) or "",
        )


@dataclass(frozen=True)
class FindingView(Finding):
    """One finding as the UI shows it: the analysis's Finding (what went wrong, where, and
    what to change), and ``index``, its position in the report's findings (what caused_by
    points at: the UI lists them by severity)."""

    index: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], index: int | None = None) -> FindingView:
        return replace(super().from_dict(data), index=index)


@dataclass(frozen=True)
class WaitEdge:
    """One rank blocked on others: in which group, at which seq, in which op."""

    rank: int
    waits_for: tuple[int, ...]
    group: str = "0"
    seq: int | None = None
    op: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WaitEdge | None:
        rank = as_int(data.get("rank"))
        if rank is None:
            return None
        group = data.get("group")
        return cls(
            rank=rank,
            waits_for=tuple(r for r in (as_int(x) for x in as_list(data.get("waits_for"))) if r is not None),
            group=str(group) if group is not None else "0",
            seq=as_int(data.get("seq")),
            op=as_str(data.get("op")) or "",
        )


@dataclass(frozen=True)
class ProfileView:
    """How a rank spent its time: computing vs waiting in collectives."""

    compute_s: float
    wait_s: float
    collectives: int | None

    @property
    def wait_fraction(self) -> float:
        total = self.compute_s + self.wait_s
        return self.wait_s / total if total > 0 else 0.0


@dataclass(frozen=True)
class ReportView:
    """A whole report, ready to show; built from any dict without raising."""

    outcome: str = ""
    command: tuple[str, ...] = ()
    world_size: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    run_dir: str = ""
    live: bool = False
    ranks: tuple[RankView, ...] = ()
    findings: tuple[FindingView, ...] = ()
    timeline: Mapping[int, tuple[CallRecord, ...]] = field(default_factory=dict)
    profile: Mapping[int, ProfileView] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    waits: tuple[WaitEdge, ...] = ()
    attempt: int | None = None  # a restarted job: which attempt this report is of
    attempts: tuple[tuple[int, str, str], ...] = ()  # (attempt, outcome, its report path)
    transports: str = ""  # each group's ring transport, one line (report["transports"])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], parser: CollectiveParser | None = None) -> ReportView:
        """The view of a report dict; `parser` reuses what the previous poll already parsed."""
        if not isinstance(data, Mapping):
            return cls(problems=("the report is not a JSON object",))
        # what the UI shows is made safe for the terminal (terminal_text); the timeline's
        # entries are, as each is parsed (once: the parser keeps them across polls)
        data = {k: v if k in UNCLEANED else safe_value(v, free=True) for k, v in data.items()}
        parser = parser if parser is not None else CollectiveParser()
        ranks = tuple(
            RankView.from_dict(r, i, parser)
            for i, r in enumerate(as_list(data.get("ranks")))
            if isinstance(r, dict)
        )
        findings = tuple(
            sorted(
                (FindingView.from_dict(f, i) for i, f in enumerate(as_list(data.get("findings"))) if isinstance(f, dict)),
                key=lambda f: SEVERITY_ORDER.get(f.severity, 3),
            )
        )
        view = cls(
            outcome=as_str(data.get("outcome")) or "",
            command=tuple(str(c) for c in as_list(data.get("command"))),
            world_size=as_int(data.get("world_size")),
            started_at=parse_time(data.get("started_at")),
            ended_at=parse_time(data.get("ended_at")),
            run_dir=as_str(data.get("run_dir")) or "",
            live=bool(data.get("live", False)),
            ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
            findings=findings,
            timeline=parser.timeline(as_dict(data.get("timeline"))),
            profile=_profile(as_dict(data.get("profile"))),
            problems=tuple(str(p) for p in as_list(data.get("problems"))),
            waits=tuple(
                e for e in (WaitEdge.from_dict(w) for w in as_list(data.get("waits")) if isinstance(w, dict)) if e is not None
            ),
            attempt=as_int(data.get("attempt")),
            attempts=tuple(
                (a, as_str(e.get("outcome")) or "", as_str(e.get("report")) or "")
                for e in as_list(data.get("attempts"))
                if isinstance(e, dict) and (a := as_int(e.get("attempt"))) is not None
            ),
            transports=transport_line([e for e in as_list(data.get("transports"))
                                       if isinstance(e, dict)]),
        )
        parser.done()
        return view

    @property
    def faulty_ranks(self) -> frozenset[int]:
        """Ranks named by a finding of severity error."""
        return frozenset(r for f in self.findings if f.severity == "error" for r in f.ranks)

    @property
    def divergent(self) -> FindingView | None:
        """The first error finding that names a seq: the mismatch to highlight."""
        return next((f for f in self.findings if f.severity == "error" and f.seq is not None), None)

    def rank(self, rank: int) -> RankView | None:
        return next((r for r in self.ranks if r.rank == rank), None)

    def groups(self) -> list[str]:
        """Process groups seen in the timeline, the default group "0" first."""
        names = {c.group for entries in self.timeline.values() for c in entries}
        return sorted(names, key=lambda g: (g != "0", len(g), g))

    def reference_time(self, now: float) -> float:
        """The moment "time in op" is measured to: now while live, else the report's end."""
        if self.live or self.ended_at is None:
            return now
        return self.ended_at


UNCLEANED = frozenset({"timeline", "profile"})  # cleaned entry by entry, or numbers only


class CollectiveParser:
    """Parses collectives, reusing those parsed at the previous poll (a live run re-sends them all).

    One parser lives in the poll worker; each `ReportView.from_dict` call is one poll.
    """

    def __init__(self) -> None:
        self._previous: dict[tuple[Any, ...], CallRecord] = {}
        self._current: dict[tuple[Any, ...], CallRecord] = {}
        self._previous_rows: dict[tuple[Any, ...], tuple[CallRecord, ...]] = {}
        self._current_rows: dict[tuple[Any, ...], tuple[CallRecord, ...]] = {}

    def entries(self, raw: list[Any]) -> tuple[CallRecord, ...]:
        """The collectives of one list; the same tuple object as last poll when nothing changed."""
        if not raw:
            return ()
        open_entries = sum(1 for e in raw if isinstance(e, dict) and e.get("end") is None)
        signature = (len(raw), open_entries, _entry_key(raw[0]), _entry_key(raw[-1]))
        row = self._previous_rows.get(signature) or self._current_rows.get(signature)
        if row is None:
            row = tuple(self._entry(e) for e in raw if isinstance(e, dict))
        self._current_rows[signature] = row
        return row

    def _entry(self, raw: dict[str, Any]) -> CallRecord:
        key = _entry_key(raw)
        entry = self._previous.get(key) or self._current.get(key)
        if entry is None:
            entry = CallRecord.from_report_dict(safe_value(raw))
        self._current[key] = entry
        return entry

    def timeline(self, data: Mapping[str, Any]) -> dict[int, tuple[CallRecord, ...]]:
        out: dict[int, tuple[CallRecord, ...]] = {}
        for key, raw in data.items():
            rank = as_int(key)
            if rank is not None and isinstance(raw, list):
                out[rank] = self.entries(raw)
        return out

    def done(self) -> None:
        """End of a poll: keep only what this poll saw, so memory stays bounded."""
        self._previous, self._current = self._current, {}
        self._previous_rows, self._current_rows = self._current_rows, {}


def _entry_key(raw: Any) -> tuple[Any, ...]:
    """What tells one timeline entry from another (each part hashable, whatever a report.json
    holds there)."""
    if not isinstance(raw, dict):
        return (None,)
    return tuple(
        v if v is None or isinstance(v, (str, int, float)) else str(v)
        for v in (
            raw.get("group"),
            raw.get("seq"),
            raw.get("op"),
            raw.get("start", raw.get("since")),
            raw.get("end"),
            raw.get("callsite"),
            str(raw.get("shapes")),
            str(raw.get("dtypes")),
            raw.get("origin"),
            raw.get("iteration"),
        )
    )


def _profile(data: Mapping[str, Any]) -> dict[int, ProfileView]:
    out: dict[int, ProfileView] = {}
    for key, entry in data.items():
        rank = as_int(key)
        if rank is None or not isinstance(entry, dict):
            continue
        out[rank] = ProfileView(
            compute_s=as_float(entry.get("compute_s")) or 0.0,
            wait_s=as_float(entry.get("wait_s")) or 0.0,
            collectives=as_int(entry.get("collectives")),
        )
    return out
