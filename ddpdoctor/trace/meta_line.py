"""One line of a meta log parsed, a group's member list read once for every rank that lists it."""

from __future__ import annotations

import json
from typing import Any

_KEY = b'"ranks": ['  # as json.dumps writes it
_NUMBERS = b"0123456789, -"
_MEMBERS: dict[bytes, list[int]] = {}  # the text of a member list -> the one parsed list
MAX_SHARED = 4096  # distinct member lists kept (a long-lived supervisor sees many jobs)
SHARED_FROM = 256  # shorter lists are parsed as they come (cheap, and seldom repeated)


def parse_meta_line(line: bytes) -> Any:
    """``json.loads(line)``, except that a long list of member ranks (a group event's
    ``"ranks"``: N numbers in each of N ranks' logs) is parsed once and shared, read-only,
    by every event that lists the same members.  Raises ValueError as json.loads does."""
    start = line.find(_KEY) if len(line) > SHARED_FROM else -1
    end = line.find(b"]", start) if start >= 0 else -1
    start += len(_KEY)
    if end - start < SHARED_FROM or line.find(_KEY, end) >= 0:
        return json.loads(line)
    key = line[start:end]
    members = _MEMBERS.get(key)
    if members is None:
        if key.translate(None, _NUMBERS):
            return json.loads(line)  # not a list of numbers
        members = json.loads(b"[" + key + b"]")
    obj = json.loads(line[:start] + line[end:])  # the line with an empty list
    if not isinstance(obj, dict) or obj.get("ranks") != []:
        return json.loads(line)  # "ranks" was not the top-level list: no shortcut
    if key not in _MEMBERS:
        if len(_MEMBERS) >= MAX_SHARED:
            _MEMBERS.clear()
        _MEMBERS[key] = members
    obj["ranks"] = members
    return obj


def traceback_frames(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The frames of an exception event's ``traceback``, outermost first: the frame dicts of
    its list; anything else there (a damaged line's ``true`` or text) is no frame."""
    frames = event.get("traceback")
    return [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []
