"""Text made safe for a terminal: every control character shown escaped, whatever its source.

What ddpdoctor prints comes from places it does not control: a trace or a report.json (written
by the user's processes, or by whoever could write the run dir), the user's source files and
their names (lint), a job's output, an exception's message.  A terminal acts on control
characters: an escape sequence can clear the screen, retitle the window, write the clipboard
(OSC 52), plant a hyperlink (OSC 8) or, with C1 controls, do the same without an ESC byte.
So every writer to a terminal (the console, the UI, lint, notices) passes its text through
here: each C0 and C1 control, DEL, line and paragraph separator, bidirectional control and
lone surrogate is replaced by its escape (``\\x1b``, ``\\u202e``), as ``repr`` shows it.
``safe`` makes one line (line breaks escaped too); ``safe_lines`` keeps line breaks and tabs.

``SafeConsole`` is a rich Console that applies ``safe_lines`` to every segment of text it
writes (its own styles and cursor moves are not text) and drops hyperlinks from styles (a
markup ``[link=...]`` smuggled into a string): whatever a caller forgot to clean.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import IO, TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from rich.console import Console

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}"
                                "\ud800-\udfff]")
FREE_TEXT = frozenset({"message", "error", "text", "detail", "stderr", "output"})
MAX_DEPTH = 64


def _escape(m: re.Match[str]) -> str:
    char = m[0]
    if "\ud800" <= char <= "\udfff":
        return f"\\u{ord(char):04x}"  # repr would keep a lone surrogate as it is
    return repr(char)[1:-1]


def safe(text: str) -> str:
    """``text`` with every control character escaped: one line, nothing a terminal acts on."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def safe_lines(text: str) -> str:
    """``text`` with its control characters escaped, except line breaks and tabs."""
    return _CONTROL_BUT_LINES.sub(_escape, text) if _CONTROL_BUT_LINES.search(text) else text


def safe_value(value: Any, free: bool = False, depth: int = 0) -> Any:
    """A JSON value with every string made safe (keys too; the values of ``FREE_TEXT`` keys
    keep their line breaks).  Past ``MAX_DEPTH`` levels a container is cut to nothing."""
    if isinstance(value, str):
        return safe_lines(value) if free else safe(value)
    if depth > MAX_DEPTH:
        return None if isinstance(value, (list, dict)) else value
    if isinstance(value, list):
        return [safe_value(v, free, depth + 1) for v in value]
    if isinstance(value, dict):
        return {safe(k) if isinstance(k, str) else k:
                safe_value(v, k in FREE_TEXT, depth + 1) for k, v in value.items()}
    return value


def may_need(raw: bytes) -> bool:
    """Whether JSON text can hold a control character at all: json escapes those below
    0x20 (a backslash), and the others are DEL (0x7f, allowed raw) or above ASCII (bytes >=
    0x80); text with none of these has none."""
    return b"\\" in raw or b"\x7f" in raw or not raw.isascii()


def say(text: str, file: IO[str] | None = None) -> None:
    """One line (or a few) to ``file`` (stderr), made safe, that never fails: the stream may
    be a closed pipe or a terminal that hung up."""
    try:
        print(safe_lines(text), file=file or sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # nobody reads it any more


@functools.lru_cache(maxsize=1)
def _safe_console_class() -> type[Console]:
    """SafeConsole, built on first use: a rank's process imports this module (its trace
    reader cleans text) and must not pay for importing rich."""
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.segment import Segment

    class SafeConsole(Console):
        """A rich Console whose every text segment is made safe and whose styles carry no
        hyperlink: what reaches the terminal is the caller's text, never a command to it."""

        def render(self, renderable: RenderableType,
                   options: ConsoleOptions | None = None) -> Iterable[Segment]:
            for segment in super().render(renderable, options):
                text, style, control = segment
                if control:
                    yield segment
                    continue
                if style is not None and style.link:
                    style = style.update_link(None)
                yield Segment(safe_lines(text), style)

    return SafeConsole


def __getattr__(name: str) -> Any:
    if name == "SafeConsole":
        return _safe_console_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
