"""A finding's evidence as sentences for the UI: times as clock times, no JSON, no nulls.

The recorded decision (where the ranks' paths parted) comes first, in words; then every other
fact as ``Key: value.``, nested values flattened (``rank 0: all_reduce; rank 1: barrier``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

from ddpdoctor.report.lint_match import LINT_KEY

EPOCH_S = (1e9, 1e11)  # a number in this range under a time-like key is unix seconds
EPOCH_NS = (1e18, 1e20)  # and in this one, unix nanoseconds
TIME_WORDS = ("time", "since", "at", "started", "ended", "t", "ts", "when")
MAX_ITEMS = 8  # of a list or a mapping, the rest counted
MAX_CHARS = 400


def clock(seconds: float) -> str:
    """``10:20:31.250 UTC``."""
    moment = dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def _is_time(key: str, value: float) -> float | None:
    """``value`` as unix seconds when ``key`` names a time and the number is one, else None."""
    words = key.lower().replace("-", "_").split("_")
    if key.endswith("_ns") and EPOCH_NS[0] <= value < EPOCH_NS[1]:
        return value / 1e9
    if any(w in TIME_WORDS for w in words) and EPOCH_S[0] <= value < EPOCH_S[1]:
        return float(value)
    return None


def _short(site: Any) -> str:
    text = str(site)
    path, sep, line = text.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{line}" if sep and line.isdigit() else text


def value_text(key: str, value: Any) -> str:
    """One value in words ("" for nothing to say)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        when = _is_time(key, value)
        return clock(when) if when is not None else f"{value:g}" if isinstance(value, float) \
            else str(value)
    if isinstance(value, Mapping):
        parts = []
        for k, v in list(value.items())[:MAX_ITEMS]:
            said = value_text(str(k), v)
            if said:
                name = f"rank {k}" if str(k).isdigit() else str(k).replace("_", " ")
                parts.append(f"{name}: {said}")
        more = len(value) - MAX_ITEMS
        return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    if isinstance(value, (list, tuple)):
        items = [f"[{value_text(key, v)}]" if isinstance(v, (list, tuple)) else
                 value_text(key, v) for v in value[:MAX_ITEMS]]
        more = len(value) - MAX_ITEMS
        return ", ".join(i for i in items if i) + (f" and {more} more" if more > 0 else "")
    return str(value)


def decision_sentence(decision: Mapping[str, Any]) -> str:
    """The recorded decision where the ranks' paths parted, in one sentence: the contract's
    ``{"file", "line", "source", "ranks": {...}}`` or the explanation's ``{"callsite",
    "source", "condition", "decided_by"}``."""
    site = _short(decision.get("callsite") or
                  f"{decision.get('file', '?')}:{decision.get('line', '?')}")
    source = decision.get("source")
    text = f"The ranks' paths parted at {site}" + (f" `{source}`" if source else "")
    if decision.get("condition"):
        text += f": {decision['condition']}"
    if decision.get("decided_by"):
        text += f", decided by {decision['decided_by']}"
    ranks = decision.get("ranks")
    if isinstance(ranks, Mapping) and ranks:
        took = []
        for rank, said in list(ranks.items())[:MAX_ITEMS]:
            if not isinstance(said, Mapping):
                continue
            values = value_text("values", said.get("values"))
            took.append(f"rank {rank} {said.get('outcome', '?')}" +
                        (f" ({values})" if values else ""))
        if took:
            text += ": " + "; ".join(took)
    return text + "."


def _decision_of(evidence: Mapping[str, Any]) -> Mapping[str, Any] | None:
    decision = evidence.get("decision")
    why = evidence.get("why")
    if not isinstance(decision, Mapping) and isinstance(why, Mapping):
        decision = why.get("decision")
    return decision if isinstance(decision, Mapping) and decision else None


def evidence_sentences(evidence: Mapping[str, Any]) -> list[str]:
    """The evidence as sentences, the recorded decision first; nothing for a null or an empty
    value, nothing for the lint note (said apart)."""
    lines = []
    decision = _decision_of(evidence)
    if decision is not None:
        lines.append(decision_sentence(decision))
    for key, value in evidence.items():
        if key in (LINT_KEY, "decision"):
            continue
        if key == "why" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "decision"}
        said = value_text(key, value)
        if not said:
            continue
        if len(said) > MAX_CHARS:
            said = said[:MAX_CHARS - 1] + "…"
        lines.append(f"{key[:1].upper()}{key[1:].replace('_', ' ')}: {said}.")
    return lines
