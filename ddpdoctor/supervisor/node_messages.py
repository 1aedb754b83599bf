"""What the supervisors of a many-node job say to each other, parsed field by field with types checked.

A value read from the nodes' channel is only a value: its keys never become keyword
arguments, a field of the wrong type is left out (its default), and lists and maps are cut
to what a real job can have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_RANKS = 1 << 16  # ranks of one node named in one message
MAX_ACKS = 64
MAX_TEXT = 1024
MAX_NODE_NAME = 64


def _int(value: Any, lo: int = -(1 << 63), hi: int = (1 << 63) - 1) -> int | None:
    return value if type(value) is int and lo <= value <= hi else None


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _ints(value: Any, limit: int) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(v for v in value[:limit] if type(v) is int and 0 <= v < 1 << 31)


def node_name(value: Any) -> str | None:
    """A node's name as sent (its node rank, or host-pid), if it is a plain short name."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NODE_NAME:
        return None
    if value.startswith(".") or not all(c.isalnum() or c in "._-" for c in value):
        return None
    return value


@dataclass(frozen=True)
class RankProgress:
    """A rank's progress facts, on its node's clock."""

    progress_ns: int | None = None
    cpu_busy: bool | None = None

    @classmethod
    def parse(cls, raw: Any) -> "RankProgress":
        if not isinstance(raw, dict):
            return cls()
        busy = raw.get("cpu_busy")
        return cls(_int(raw.get("progress_ns"), 0), busy if type(busy) is bool else None)


@dataclass(frozen=True)
class NodeReport:
    """One push of a following node: its clock, host, attempt, run dir changes (``delta``,
    checked where it is applied: trace/sync.py), ranks and their progress, the stack
    requests it answered, and whether its job ended or it read node 0's final word."""

    t_ns: int | None = None
    host: str = ""
    attempt: int | None = None
    delta: dict[str, Any] | None = None
    progress: dict[str, RankProgress] = field(default_factory=dict)
    acks: tuple[int, ...] = ()
    ranks: tuple[int, ...] | None = None
    done: bool = False
    exit_code: int | None = None
    read_final: bool = False

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> "NodeReport":
        progress = raw.get("progress")
        facts = {}
        if isinstance(progress, dict):
            for rank, fact in list(progress.items())[:MAX_RANKS]:
                if isinstance(rank, str) and rank.isdigit() and len(rank) <= 10:
                    facts[rank] = RankProgress.parse(fact)
        delta = raw.get("delta")
        return cls(t_ns=_int(raw.get("t")), host=_text(raw.get("host"), 255),
                   attempt=_int(raw.get("attempt"), 0, 1 << 20),
                   delta=delta if isinstance(delta, dict) else None, progress=facts,
                   acks=_ints(raw.get("acks"), MAX_ACKS) or (),
                   ranks=_ints(raw.get("ranks"), MAX_RANKS), done=raw.get("done") is True,
                   exit_code=_int(raw.get("exit_code"), -(1 << 31), 1 << 31),
                   read_final=raw.get("read_final") is True)


@dataclass(frozen=True)
class StackAsk:
    """Node 0 asks for stacks: of ``ranks``, or of every rank (None)."""

    ranks: tuple[int, ...] | None

    @classmethod
    def parse(cls, raw: Any) -> "StackAsk | None":
        if not isinstance(raw, dict) or "ranks" not in raw:
            return None
        ranks = raw["ranks"]
        if ranks is None:
            return cls(None)
        parsed = _ints(ranks, MAX_RANKS)
        return cls(parsed) if parsed is not None else None


@dataclass(frozen=True)
class NodeVerdict:
    """Node 0's verdict on the job: stop every node's ranks (``stop``) or not."""

    reason: str
    message: str
    stop: bool
    exit_code: int | None

    @classmethod
    def parse(cls, raw: Any) -> "NodeVerdict | None":
        if not isinstance(raw, dict) or type(raw.get("stop")) is not bool:
            return None
        return cls(_text(raw.get("reason"), 64), _text(raw.get("message")), raw["stop"],
                   _int(raw.get("exit_code"), 0, 255))

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message, "stop": self.stop,
                "exit_code": self.exit_code}


@dataclass(frozen=True)
class FinalWord:
    """Node 0 wrote the job's report: where, how the job ended, on which host."""

    report: str | None
    outcome: str | None
    host: str

    @classmethod
    def parse(cls, raw: Any) -> "FinalWord | None":
        if not isinstance(raw, dict):
            return None
        report, outcome = raw.get("report"), raw.get("outcome")
        return cls(_text(report, 4096) if isinstance(report, str) else None,
                   outcome if outcome in ("completed", "failed", "hung") else None,
                   _text(raw.get("host"), 255))

    def as_dict(self) -> dict[str, Any]:
        return {"report": self.report, "outcome": self.outcome, "host": self.host}
