"""A rank's recorded control flow, typed: its branch sites, its segments and the values its
conditions read (runtime/control_flow.py writes them; trace/flow.py is the format)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ddpdoctor.trace import layout as L
from ddpdoctor.trace.flow import FlowEntry, decode_entries
from ddpdoctor.trace.record import CallRecord

MAX_SITES = 20_000  # a meta log naming more is damaged (the runtime stops at this many)


@dataclass(frozen=True)
class FlowSite:
    """One branch instruction of the user's code as a rank named it: ``op`` the bytecode
    (``FOR_ITER``: a loop's next item; ``POP_JUMP_IF_*``: a test), ``fall``/``jump`` the
    lines its two ways lead to, ``names`` what its condition reads."""

    number: int
    file: str
    line: int
    col: int
    func: str
    op: str
    names: tuple[str, ...] = ()
    fall: int | None = None
    jump: int | None = None

    @property
    def key(self) -> tuple[str, int, int, str]:
        """The site across ranks (their numbers differ; the file's name is the same)."""
        return (os.path.basename(self.file), self.line, self.col, self.op)

    @property
    def loop(self) -> bool:
        return self.op == "FOR_ITER"


@dataclass(frozen=True)
class Segment:
    """A rank's path between two collectives of its main thread: ``opening`` the (group,
    seq) of the collective that began it ((-1, -1) before the first), ``closing`` the one
    that ended it (None: still open, or the process ended), ``entries`` per site number."""

    number: int
    opening: tuple[str, int]
    closing: tuple[str, int] | None
    entries: tuple[FlowEntry, ...]
    t_start: int
    t_end: int


@dataclass(frozen=True)
class ValueNote:
    """What a site's condition read the first times one way of it was taken."""

    site: int
    way: int
    segment: int
    values: dict[str, str]


@dataclass(frozen=True)
class RankFlow:
    """Everything one rank recorded of its control flow."""

    sites: dict[int, FlowSite]
    segments: tuple[Segment, ...]
    notes: tuple[ValueNote, ...]

    def values(self, site: int, way: int, segment: int | None = None) -> dict[str, str]:
        """The values noted for ``way`` of ``site`` (the note nearest before ``segment``)."""
        found = [n for n in self.notes if n.site == site and n.way == way]
        if segment is not None:
            found = [n for n in found if n.segment <= segment] or found
        return dict(found[-1].values) if found else {}


def _int(value: Any, default: int | None = None) -> int | None:
    return value if type(value) is int else default


def _site(m: dict[str, Any]) -> FlowSite | None:
    number, line = _int(m.get("site")), _int(m.get("line"))
    if number is None or line is None or not isinstance(m.get("file"), str):
        return None
    names = m.get("names")
    return FlowSite(number, str(m["file"]), line, _int(m.get("col"), -1) or 0,
                    str(m.get("func") or ""), str(m.get("op") or ""),
                    tuple(str(n) for n in names[:8]) if isinstance(names, list) else (),
                    _int(m.get("fall")), _int(m.get("jump")))


def _note(m: dict[str, Any]) -> ValueNote | None:
    site, way, seg = _int(m.get("site")), _int(m.get("way")), _int(m.get("segment"))
    values = m.get("values")
    if site is None or way not in (0, 1) or seg is None or not isinstance(values, dict):
        return None
    return ValueNote(site, way, seg, {str(k)[:80]: str(v)[:80] for k, v
                                      in list(values.items())[:8]})


def _segments(records: list[CallRecord], names: dict[int, str]) -> tuple[Segment, ...]:
    """The PATH records as segments (a long segment's parts joined; an open segment's
    partial records replaced by its newest)."""
    parts: dict[int, list[CallRecord]] = {}
    for rec in records:
        if rec.kind == L.RecordKind.PATH:
            parts.setdefault(rec.nbytes, []).append(rec)
    out = []
    for number, recs in sorted(parts.items()):
        newest = max(r.t_end for r in recs)
        recs = sorted((r for r in recs if r.t_end == newest), key=lambda r: r.aux)
        first = recs[0]
        entries = tuple(e for r in recs for e in decode_entries(r.callsite))
        opening = (names.get(first.group_index, str(first.group_index)), first.seq)
        closing = (names.get(first.peer, str(first.peer)), first.parent) \
            if first.peer >= 0 else None
        out.append(Segment(number, opening, closing, entries, first.t_start, newest))
    return tuple(out)


def rank_flow(records: list[CallRecord], meta: list[dict[str, Any]],
              names: dict[int, str]) -> RankFlow | None:
    """The rank's flow from its trace's records and meta log (None: nothing recorded,
    e.g. Python < 3.12)."""
    sites: dict[int, FlowSite] = {}
    notes: list[ValueNote] = []
    for m in meta:
        event = m.get("event")
        if event == "flow_site" and len(sites) < MAX_SITES:
            site = _site(m)
            if site is not None:
                sites.setdefault(site.number, site)
        elif event == "flow_values":
            note = _note(m)
            if note is not None:
                notes.append(note)
    if not sites:
        return None
    return RankFlow(sites, _segments(records, names), tuple(notes))
