"""Trace text in a repro script: a one-line comment, a ``repr`` in code, inert in the header.

A repro is a script the user is told to run, made from a trace the user's process wrote:
its call sites, source lines, loader sites and the job's command are data, never code.  A
comment gets one line (every control character escaped: no line break ends it); a string
in code is a ``repr``; the header's docstring gets text with no backslash, no triple quote
and no control character.  ``checked`` parses the whole script: one that does not parse
is never written.
"""

from __future__ import annotations

import ast

from ddpdoctor.trace.text import clean


def comment(text: str) -> str:
    """``text`` for a ``#`` comment: one line."""
    return clean(text)


def doc(text: str) -> str:
    """``text`` for a triple-quoted docstring: no control character, backslash or triple
    quote (each would end or change it)."""
    return clean(text).replace("\\", "/").replace(chr(34) * 3, chr(39) * 3)


def literal(text: str) -> str:
    """``text`` as a Python string literal."""
    return repr(clean(text))


def checked(script: str) -> str:
    """``script`` if it parses as Python; raises ValueError otherwise."""
    try:
        ast.parse(script)
    except SyntaxError as e:
        raise ValueError(f"the repro script does not parse: {e}") from None
    return script
