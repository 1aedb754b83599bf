"""ddpdoctor plugin: the ``chrome-trace`` exporter (Chrome trace-event JSON for Perfetto).

Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
(``traceEvents`` with ``ph`` "X" complete slices, "i" instants, "M" metadata; ``ts`` and
``dur`` in microseconds).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddpdoctor.hookspecs import hookimpl

TID_COLLECTIVES = 0
TID_RING = 1
TID_BATCHES = 2
THREAD_NAMES = {TID_COLLECTIVES: "collectives", TID_RING: "ring steps",
                TID_BATCHES: "batches"}


def _us(ns: int, t0: int) -> float:
    return round((ns - t0) / 1000.0, 3)


def _shapes(shapes: Any) -> list[list[int]]:
    return [list(s) for s in shapes]


def trace_events(job: Any) -> list[dict[str, Any]]:
    """The trace events of a JobView: one pid per rank, tids per kind of record."""
    starts = [r.header.started_ns for r in job.ranks.values()]
    for run in job.ranks.values():  # the earliest record, should a clock have jumped
        starts += [c[0].t_start for c in run.calls.values() if c]
        starts += [rec.t_start for rec in (run.batches[:1] + run.ring_steps[:1])]
    t0 = min((t for t in starts if t > 0), default=0)
    end = job.now_ns
    events: list[dict[str, Any]] = []
    for rank, run in sorted(job.ranks.items()):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank} (pid {run.pid})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for tid, name in THREAD_NAMES.items():
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                           "args": {"name": name}})
        for group, calls in run.calls.items():
            for c in calls:
                stop = c.t_end or max(end, c.t_start)
                events.append({
                    "ph": "X", "pid": rank, "tid": TID_COLLECTIVES, "cat": "collective",
                    "name": c.op + (" (never returned)" if c.open else ""),
                    "ts": _us(c.t_start, t0), "dur": _us(stop, c.t_start),
                    "args": {"seq": c.seq, "op": c.op, "group": group,
                             "shapes": _shapes(c.in_shapes), "dtypes": list(c.dtypes),
                             "reduce_op": c.reduce_op or None,
                             "callsite": c.short_site,
                             "open": c.open}})
        for c in run.p2p:
            stop = c.t_end or max(end, c.t_start)
            events.append({"ph": "X", "pid": rank, "tid": TID_COLLECTIVES, "cat": "p2p",
                           "name": f"{c.op} peer {c.peer}", "ts": _us(c.t_start, t0),
                           "dur": _us(stop, c.t_start),
                           "args": {"seq": c.seq, "op": c.op, "peer": c.peer,
                                    "shapes": _shapes(c.in_shapes),
                                    "callsite": c.short_site}})
        for rec in run.ring_steps:
            stop = rec.t_end or max(end, rec.t_start)
            send = rec.op == "ring_send"
            events.append({
                "ph": "X", "pid": rank, "tid": TID_RING, "cat": "ring",
                "name": f"{'send to' if send else 'recv from'} {rec.peer}",
                "ts": _us(rec.t_start, t0), "dur": _us(stop, rec.t_start),
                "args": {"seq": rec.parent, "op": rec.op, "step": rec.seq,
                         "segment": rec.aux, "bytes": rec.nbytes, "peer": rec.peer,
                         "shapes": [[rec.numel]], "callsite": rec.callsite}})
        for rec in run.batches:
            events.append({"ph": "i", "s": "t", "pid": rank, "tid": TID_BATCHES,
                           "cat": "batch", "name": f"batch {rec.seq}",
                           "ts": _us(rec.t_start, t0),
                           "args": {"batch": rec.seq, "epoch": rec.aux,
                                    "size": rec.numel}})
    return events


def export(job: Any, path: Path) -> None:
    """Write the job as a Chrome trace-event JSON file at ``path``."""
    doc = {"traceEvents": trace_events(job), "displayTimeUnit": "ms",
           "otherData": {"producer": "ddpdoctor-chrome-trace", "world_size": job.world_size,
                         "command": job.command}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


export.default_filename = "trace.chrome.json"  # type: ignore[attr-defined]


@hookimpl
def register_exporters(register: Any) -> None:
    register("chrome-trace", export)
