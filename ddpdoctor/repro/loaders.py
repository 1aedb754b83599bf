"""A rank's DataLoader epochs as replay steps: an epoch's start, each batch drawn, its end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ddpdoctor.analysis.model import RankRun
from ddpdoctor.repro.steps import Step, source_line
from ddpdoctor.trace.record import short_site

START, BATCH, END = "loader_start", "loader_batch", "loader_end"
OPS = (START, BATCH, END)


def loader_names(runs: list[RankRun]) -> dict[int, str]:
    """Each loader id of the job -> its replay name (``loader_0``, ...), in the order the
    loaders were first iterated on any rank."""
    first: dict[int, int] = {}
    for run in runs:
        for ev in run.trace.meta_events("loader_epoch"):
            lid, t = ev.get("loader"), ev.get("t")
            if type(lid) is int and type(t) is int:
                first[lid] = min(t, first.get(lid, t))
    return {lid: f"loader_{i}" for i, lid in enumerate(sorted(first, key=first.__getitem__))}


def loader_sites(runs: list[RankRun], names: dict[int, str]) -> dict[str, str]:
    """Replay name -> the user's line that iterated it (file:line and source)."""
    out: dict[str, str] = {}
    for run in runs:
        for ev in run.trace.meta_events("loader_epoch"):
            name = names.get(ev.get("loader"))  # type: ignore[arg-type]
            if name and name not in out and isinstance(ev.get("site"), str):
                site = ev["site"]
                out[name] = f"{short_site(site)}  {source_line(site)}".rstrip()
    return out


def timed_steps(run: RankRun, names: dict[int, str]) -> list[tuple[int, Step]]:
    """(time, step) of each loader epoch's start (with its length), batch and end."""
    out: list[tuple[int, Step]] = []
    for ev in run.trace.meta_events("loader_epoch"):
        name = names.get(ev.get("loader"))  # type: ignore[arg-type]
        if name is None or type(ev.get("t")) is not int:
            continue
        length = _length(run, ev)
        out.append((ev["t"], Step(START, name, in_shapes=((length,),), peer=_epoch(ev))))
    for ev in run.trace.meta_events("loader_end"):
        name = names.get(ev.get("loader"))  # type: ignore[arg-type]
        if name is not None and type(ev.get("t")) is int:
            out.append((ev["t"], Step(END, name, peer=_epoch(ev))))
    for rec in run.batches:
        lid = rec.callsite.split(":", 1)[0]
        name = names.get(int(lid)) if lid.isdigit() else None
        if name is not None:
            out.append((rec.t_start, Step(BATCH, name, peer=rec.aux)))
    return out


def _epoch(ev: dict[str, Any]) -> int:
    return ev["epoch"] if type(ev.get("epoch")) is int else -1


def _length(run: RankRun, ev: dict[str, Any]) -> int:
    """The epoch's number of batches: its length, else the count the header kept."""
    if type(ev.get("length")) is int and ev["length"] >= 0:
        return ev["length"]
    counts = [c.batches for c in run.header.loaders
              if c.loader == ev.get("loader") and c.epoch == ev.get("epoch")]
    return max(counts, default=0)


def drawn(run: RankRun, names: dict[int, str]) -> dict[tuple[str, int], int]:
    """(loader name, epoch) -> batches the rank drew, as its header counted them."""
    return {(names[c.loader], c.epoch): c.batches for c in run.header.loaders
            if c.loader in names}


def add_unrecorded_batches(steps: list[Step], counts: dict[tuple[str, int], int]) -> list[Step]:
    """Only an epoch's first batches are recorded one by one: the others (counted in the
    header) are put back, one before each further repetition of the last recorded
    iteration's calls (or right after the last recorded batch when it made none)."""
    out = list(steps)
    for (name, epoch), total in counts.items():
        marks = [i for i, s in enumerate(out) if s.op == BATCH and s.group == name and
                 s.peer == epoch]
        missing = total - len(marks)
        if not marks or missing <= 0:
            continue
        body = _iteration(out, marks)
        pos = marks[-1] + 1 + _matches(out, marks[-1] + 1, body)
        for _ in range(missing):
            out.insert(pos, replace(out[marks[-1]]))
            pos += 1 + _matches(out, pos + 1, body)
    return out


def _iteration(steps: list[Step], marks: list[int]) -> list[Any]:
    """The keys of the calls between the last two recorded batches (the loop's body)."""
    if len(marks) < 2:
        return []
    return [s.key() for s in steps[marks[-2] + 1:marks[-1]]]


def _matches(steps: list[Step], pos: int, body: list[Any]) -> int:
    """len(body) when the steps at ``pos`` repeat ``body``, else 0."""
    if body and [s.key() for s in steps[pos:pos + len(body)]] == body:
        return len(body)
    return 0
