"""Text read from a trace stays text: control characters shown escaped, never acted on.

A rank's trace is written by the user's process, and whoever controls that process (or
the run dir) controls its strings: a call site, an op or group name, a host name.  Such a
string reaches a terminal (where an escape sequence rewrites the screen), a report, and a
generated repro script (where a line break starts a statement).  So what the reader hands
on has no control character: each C0/C1 control, DEL, line and paragraph separator and
bidirectional override is replaced by its escape (``\\n``, ``\\x1b``, ``\\u202e``), as
``repr`` would show it.  Free text (an exception's message) keeps its line breaks and tabs.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                                "\u2066-\u2069]")
FREE_TEXT = frozenset({"message", "error", "text", "detail", "stderr", "output"})


def _escape(m: re.Match[str]) -> str:
    return repr(m[0])[1:-1]


def clean(text: str) -> str:
    """``text`` with every control character escaped (one line, nothing to act on)."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def clean_free(text: str) -> str:
    """``text`` with its control characters escaped except line breaks and tabs."""
    return _CONTROL_BUT_LINES.sub(_escape, text) if _CONTROL_BUT_LINES.search(text) else text


def clean_value(value: Any, free: bool = False, depth: int = 0) -> Any:
    """A JSON value with every string cleaned (the values of FREE_TEXT keys: ``clean_free``);
    keys too."""
    if isinstance(value, str):
        return clean_free(value) if free else clean(value)
    if depth > 64:
        return value
    if isinstance(value, list):
        return [clean_value(v, free, depth + 1) for v in value]
    if isinstance(value, dict):
        return {clean(k) if isinstance(k, str) else k:
                clean_value(v, k in FREE_TEXT, depth + 1) for k, v in value.items()}
    return value


def may_hold_control(line: bytes) -> bool:
    """Whether a JSON line can hold a control character at all: json escapes them (a
    backslash) and raw ones above ASCII are bytes >= 0x80; a line with neither has none."""
    return b"\\" in line or not line.isascii()
