"""report["transports"]: which transport each process group's ring used, and why, per its ranks.

Each rank writes a ``transport`` meta event when a group's ring links are set up
(ddp/shm_link.py): ``shm`` (shared memory between neighbours on one host) or ``gloo``
(gloo's send/recv), with the reason for gloo.  The report lists one entry per group,
transport and reason:

  {"group": "0", "group_ranks": [0, 1], "transport": "shm" | "gloo", "why": "" | "peers on
   another host" | "slot size disagreed (...)" | "link refused: timeout (...)" | ...,
   "ranks": the ranks that recorded it, "refused": ["pid P uid U", ...] the connections to
   these ranks' link sockets that were refused as not the neighbour's}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the TUI imports transport_line without the analysis
    from ddpdoctor.analysis.model import JobView

MAX_REFUSED = 16  # refused connections listed per entry


def transports(job: "JobView") -> list[dict[str, Any]]:
    """The ranks' ``transport`` meta events, one entry per (group, transport, why)."""
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rank in sorted(job.ranks):
        trace = job.ranks[rank].trace
        groups = trace.groups()
        for ev in trace.meta_events("transport"):
            group = groups.get(ev.get("group")) or {}
            name = str(group.get("name", ev.get("group")))
            kind, why = str(ev.get("transport", "?")), str(ev.get("why") or "")
            entry = entries.setdefault((name, kind, why), {
                "group": name, "group_ranks": [r for r in group.get("ranks") or []
                                               if type(r) is int],
                "transport": kind, "why": why, "ranks": [], "refused": []})
            if rank not in entry["ranks"]:
                entry["ranks"].append(rank)
            refused = ev.get("refused")
            if isinstance(refused, list):
                room = MAX_REFUSED - len(entry["refused"])
                entry["refused"] += [str(r) for r in refused[:max(0, room)]]
    return _first_hand(list(entries.values()))


SECOND_HAND = "another rank of the group could not"


def _first_hand(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group that fell back gives the reason of the rank that could not link: the ranks
    that only heard of it ("another rank of the group could not link") join its entry."""
    out = []
    for e in entries:
        if e["why"].startswith(SECOND_HAND):
            cause = next((c for c in entries if c["group"] == e["group"] and
                          c["transport"] == e["transport"] and c["why"] and
                          not c["why"].startswith(SECOND_HAND)), None)
            if cause is not None:
                cause["ranks"] = sorted(set(cause["ranks"]) | set(e["ranks"]))
                cause["refused"] = (cause["refused"] + e["refused"])[:MAX_REFUSED]
                continue
        out.append(e)
    return out


# the transports in plain words for people (report.json keeps "shm" and "gloo")
TRANSPORT_WORDS = {"shm": "shared memory", "gloo": "gloo (TCP)"}


def transport_line(entries: list[dict[str, Any]]) -> str:
    """One line for a console or a summary: "gradients: group 0 over shared memory; group 1
    over gloo (TCP) (why)"."""
    parts = []
    for e in entries:
        why = f" ({e['why']})" if e.get("why") else ""
        refused = f", {len(e['refused'])} stranger(s) refused" if e.get("refused") else ""
        words = TRANSPORT_WORDS.get(str(e.get("transport")), str(e.get("transport")))
        parts.append(f"group {e.get('group')} over {words}{why}{refused}")
    return "gradients: " + "; ".join(parts) if parts else ""
