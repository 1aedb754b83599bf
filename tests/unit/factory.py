"""A trace factory: RankRun and JobView from typed facts, no process launched."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.load.run_dirs import rank_run
from ddpdoctor.analysis.model import NS, JobView, RankRun
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.reader import RankTrace, TraceHeader
from ddpdoctor.trace.record import CallRecord, group_names, placed

T0 = 1_700_000_000 * NS
TORCH_C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"
NOW = T0 + 1000 * NS


def rec(seq: int, op: str = "all_reduce", group: int = 0, t: float = 0.0,
        dur: float | None = 0.001, site: str = "train.py:10", shape: tuple[int, ...] = (4,),
        peer: int = -1, flags: int = 0, kind: L.RecordKind = L.RecordKind.COLLECTIVE,
        dtype: str = "float32", aux: int = 0, framework: str = "",
        origin: Origin | None = None) -> CallRecord:
    """One record at ``t`` seconds after T0; ``dur=None``: still open; its origin, unless
    given, as the reader tells it from the op and flags (a DDP bucket: DDP's backward)."""
    start = T0 + int(t * NS)
    end = 0 if dur is None else start + max(1, int(dur * NS))
    return CallRecord(kind=kind, op=op, reduce_op="sum" if op == "all_reduce" else "",
                      flags=flags, group=str(group), group_index=group, seq=seq,
                      t_start=start, t_end=end, numel=1, peer=peer, aux=aux,
                      in_shapes=(shape,), dtypes=(dtype,), callsite=site,
                      framework_site=framework,
                      origin=origin if origin is not None else Origin.of("", op, flags)
                      if kind <= L.RecordKind.P2P else Origin.USER)


def steps(n: int, t0: float = 0.0, group: int = 0, site: str = "train.py:10",
          seq0: int = 0) -> list[CallRecord]:
    """``n`` completed all_reduces, one a second."""
    return [rec(seq0 + i, group=group, t=t0 + i, site=site) for i in range(n)]


def send(seq: int, peer: int, t: float = 0.0, dur: float | None = None) -> CallRecord:
    return rec(seq, "send", t=t, dur=dur, peer=peer, flags=int(L.RecordFlag.SEND),
               kind=L.RecordKind.P2P, site="pipe.py:20")


def recv(seq: int, peer: int, t: float = 0.0, dur: float | None = None) -> CallRecord:
    return rec(seq, "recv", t=t, dur=dur, peer=peer, flags=int(L.RecordFlag.RECV),
               kind=L.RecordKind.P2P, site="pipe.py:19")


def mark(op: str, t: float = 0.0, dur: float | None = 0.01) -> CallRecord:
    return rec(0, op, t=t, dur=dur, kind=L.RecordKind.MARK, site="")


def rank(r: int, records: list[CallRecord] = (), state: L.RankState = L.RankState.COMPUTING,
         step: int = 0, exception: dict[str, Any] | None = None, fault: str = "",
         returncode: int | None = None, stack: list[dict[str, Any]] | None = None,
         cpu_busy: bool | None = None, world: int = 2, meta: list[dict[str, Any]] = (),
         groups: dict[int, list[int]] | None = None, init: bool = True,
         host: str = "h", shift: float = 0.0) -> RankRun:
    """One rank: its records, header state, exception (type, message), fault text, stack;
    ``host`` it ran on, whose clock runs ``shift`` seconds ahead of the analyser's."""
    groups = groups or {0: list(range(world))}
    events = [{"event": "group", "index": i, "name": str(i), "ranks": members,
               "default": i == 0} for i, members in groups.items()]
    if exception is not None:
        events.append({"event": "exception", "thread": "main", "t": NOW - NS,
                       "traceback": [{"filename": "train.py", "line": 30, "name": "main"},
                                     {"filename": TORCH_C10D, "line": 2800,
                                      "name": "all_reduce"}],
                       **exception})
    records = ([mark("init")] if init else []) + list(records)
    if shift:
        d = int(shift * NS)
        records = [replace(x, t_start=x.t_start + d, t_end=x.t_end + d if x.t_end else 0)
                   for x in records]
    header = TraceHeader(pid=1000 + r, rank=r, world_size=world, local_rank=r, state=state,
                         exit_code=0, step=step, epoch=0, count=len(records),
                         heartbeat_ns=NOW - NS + int(shift * NS), last_seq=0,
                         started_ns=T0 + int(shift * NS), host=host,
                         run_id="x", capacity=4096)
    records = placed(records, r, group_names(events + list(meta)))
    run = rank_run(RankTrace(Path(f"/nonexistent/pid-{1000 + r}.ring"), header, records,
                             events + list(meta)))
    run.fault, run.returncode, run.stack, run.cpu_busy = fault, returncode, stack, cpu_busy
    return run


def frame(path: str, line: int, name: str = "main") -> dict[str, Any]:
    return {"filename": path, "line": line, "name": name}


def job(runs: list[RankRun], world: int | None = None, outcome: str | None = "hung",
        live: bool = False, hang_timeout: float = 5.0) -> JobView:
    ranks = {run.rank: run for run in runs}
    return JobView([Path("/nonexistent")], ranks, world or len(ranks), NOW, hang_timeout,
                   live, outcome=outcome)


# -- a rank's recorded control flow (runtime/control_flow.py, trace/flow.py) --------------
def flow_site(number: int, file: str, line: int, op: str = "POP_JUMP_IF_FALSE",
              fall: int | None = None, jump: int | None = None, col: int = 4,
              names: tuple[str, ...] = (), func: str = "main") -> dict[str, Any]:
    """A ``flow_site`` meta event: branch ``number`` of the rank at ``file:line``; ``fall``
    and ``jump`` the lines its two ways lead to."""
    return {"event": "flow_site", "site": number, "file": file, "line": line, "col": col,
            "func": func, "op": op, "names": list(names),
            "fall": fall if fall is not None else line + 1, "jump": jump}


def flow_values(site: int, way: int, segment: int, **values: str) -> dict[str, Any]:
    """A ``flow_values`` meta event: what ``way`` of ``site`` read in ``segment``."""
    return {"event": "flow_values", "site": site, "way": way, "after": [0, 0],
            "segment": segment, "values": dict(values)}


def segment(number: int, opening: int, closing: int | None, entries: str,
            t: float = 0.0, group: int = 0) -> CallRecord:
    """A PATH record: segment ``number`` between the collectives of seq ``opening`` and
    ``closing`` (None: still open, or the process ended) on ``group``; ``entries`` as
    trace/flow.py writes them (``SITE.FELL.JUMPED[.FLAGS]``, comma-separated)."""
    start = T0 + int(t * NS)
    return CallRecord(kind=L.RecordKind.PATH, op="unknown", group=str(group),
                      group_index=group, seq=opening, t_start=start, t_end=start + 1000,
                      peer=group if closing is not None else -1,
                      parent=closing if closing is not None else -1, nbytes=number, aux=0,
                      callsite=entries)
