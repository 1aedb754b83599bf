"""Text read from a trace stays text: control characters shown escaped, never acted on.

A rank's trace is written by the user's process, and whoever controls that process (or
the run dir) controls its strings: a call site, an op or group name, a host name.  Such a
string reaches a terminal (where an escape sequence rewrites the screen), a report, and a
generated repro script (where a line break starts a statement).  So what the reader hands
on has no control character: the escaping is the terminal's (``ddpdoctor.terminal_text``,
the one place that makes text safe), applied as the trace is read.  Free text (an
exception's message) keeps its line breaks and tabs.
"""

from __future__ import annotations

from ddpdoctor.terminal_text import FREE_TEXT, may_need, safe, safe_lines, safe_value

clean = safe  # one line, every control escaped
clean_free = safe_lines  # line breaks and tabs kept
clean_value = safe_value  # every string of a JSON value
may_hold_control = may_need

__all__ = ["FREE_TEXT", "clean", "clean_free", "clean_value", "may_hold_control"]
