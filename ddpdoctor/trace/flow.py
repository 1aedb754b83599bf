"""A rank's control flow in the trace: the PATH record's entries, written and read here.

A PATH record (``layout.RecordKind.PATH``) holds one *segment* of a rank's path through the
user's code: which way each branch of it went between two collectives of the main thread.
Its fields: ``group``/``seq``, the collective that opened the segment (-1 before the first);
``peer``/``parent``, the group and seq of the collective that closed it (-1 while the
segment is still open: a partial record of a rank that has not reached its next call);
``numel`` the events counted, ``nbytes`` the segment's number in the process (0, 1, ...),
``aux`` the record's part (a long segment takes several records), ``t_start``/``t_end``
the segment's first and last moment.  The text's site part lists the entries, one for each
way of a site, in the order the rank first took that way: ``SITE.FELL.JUMPED[.FLAGS]``
joined by ``,``, where SITE is the site's number in the process's ``flow_site`` meta events,
FELL and JUMPED how often the branch fell through and jumped (one of them 0: a site taken
both ways has two entries), and FLAGS ``s`` when the counting stopped (a hot loop,
counted up to ``HOT`` times) or ``d`` when the site was silenced the whole segment.
"""

from __future__ import annotations

from dataclasses import dataclass

HOT = 16  # events of one branch in one segment before ddpdoctor stops counting it
TEXT_PREFIX = "|||"  # the record text's shapes and dtypes parts are empty for a PATH


@dataclass(frozen=True)
class FlowEntry:
    """How one branch site went in one segment: fell through ``fell`` times, jumped
    ``jumped`` times; ``saturated`` when it was counted only up to ``HOT`` (its later
    iterations unseen), ``dark`` when the site was silenced and not seen at all."""

    site: int
    fell: int
    jumped: int
    saturated: bool = False
    dark: bool = False

    def text(self) -> str:
        flags = ("s" if self.saturated else "") + ("d" if self.dark else "")
        return f"{self.site}.{self.fell}.{self.jumped}" + (f".{flags}" if flags else "")


def encode_entries(entries: list[FlowEntry], room: int) -> list[str]:
    """The entries as record texts of at most ``room`` characters each (in order)."""
    texts: list[str] = []
    current = ""
    for e in entries:
        part = e.text()
        if current and len(TEXT_PREFIX) + len(current) + 1 + len(part) > room:
            texts.append(TEXT_PREFIX + current)
            current = ""
        current = f"{current},{part}" if current else part
    if current:
        texts.append(TEXT_PREFIX + current)
    return texts


def decode_entries(text: str) -> tuple[FlowEntry, ...]:
    """A PATH record's entries from its site part (what the reader gives as ``callsite``);
    a malformed entry is skipped."""
    out = []
    for part in text.split(","):
        bits = part.split(".")
        if len(bits) < 3 or not all(b.isdigit() for b in bits[:3]):
            continue
        flags = bits[3] if len(bits) > 3 else ""
        out.append(FlowEntry(int(bits[0]), int(bits[1]), int(bits[2]), "s" in flags,
                             "d" in flags))
    return tuple(out)
