"""Forgiving readers of report values: a wrong type reads as "unknown", never an error."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from ddpdoctor.trace.record import as_int  # noqa: F401  (the TUI's reader of ints)


def as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_time(value: Any) -> float | None:
    """Unix seconds from an ISO 8601 string or a number, None if neither."""
    number = as_float(value)
    if number is not None:
        return number
    text = as_str(value)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp()


def format_shapes(shapes: Any) -> str:
    """`[[10, 4], [3]]` as `10x4,3`; empty when unknown."""
    parts: list[str] = []
    for shape in as_list(shapes):
        if isinstance(shape, list):
            parts.append("x".join(str(d) for d in shape) if shape else "scalar")
    return ",".join(parts)
