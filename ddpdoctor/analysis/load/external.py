"""RankRuns built from facts other than ddpdoctor's own traces (flight recorder, stacks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.reader import RankTrace, TraceHeader
from ddpdoctor.trace.record import CallRecord
from ddpdoctor.rundir.bounded import BadInput, load_json, read_file
from ddpdoctor.trace.text import clean_value

DEFAULT_GROUP = "0"


def mark_record(op: str, t_start: int, t_end: int, callsite: str = "") -> CallRecord:
    """A MARK record such as ``init`` (init_process_group) or ``new_group``; ``t_end`` 0
    while the call is still running."""
    return CallRecord(kind=L.RecordKind.MARK, op=op, t_start=t_start, t_end=t_end,
                      callsite=callsite)


def external_run(rank: int, world_size: int, pid: int, host: str, path: Path,
                 calls: dict[str, list[Call]], group_ranks: dict[str, list[int]],
                 started_ns: int = 0, local_rank: int = -1,
                 meta: list[dict[str, Any]] | None = None,
                 marks: list[CallRecord] | None = None,
                 state: L.RankState = L.RankState.COMPUTING) -> RankRun:
    """A rank known only from outside (no ddpdoctor trace): a header with ``state``, its
    calls by group (seq order), MARK records (init, new_group) and the groups' members;
    the default group is "0"."""
    header = TraceHeader(pid=pid, rank=rank, world_size=world_size,
                         local_rank=local_rank if local_rank >= 0 else rank,
                         state=state, exit_code=None, step=-1, epoch=-1,
                         count=0, heartbeat_ns=0, last_seq=-1, started_ns=started_ns,
                         host=host, run_id="", capacity=0)
    groups = [{"event": "group", "index": i, "name": name, "ranks": members,
               "default": name == DEFAULT_GROUP}
              for i, (name, members) in enumerate(sorted(group_ranks.items()))]
    trace = RankTrace(path, header, list(marks or []), groups + list(meta or []))
    ordered = {g: sorted(cs, key=lambda c: c.seq) for g, cs in calls.items()}
    collectives = {g: [c for c in cs if c.kind == L.RecordKind.COLLECTIVE]
                   for g, cs in ordered.items()}
    p2p = [c for cs in ordered.values() for c in cs if c.kind == L.RecordKind.P2P]
    return RankRun(rank, trace, {g: cs for g, cs in collectives.items() if cs}, p2p, [], [],
                   dict(group_ranks))


FACTS_FILE = "facts.json"  # RUN_DIR/facts.json: ranks known from outside (ddpdoctor attach)
FACTS_SCHEMA = "ddpdoctor.facts/1"
MAX_FACTS_BYTES = 64 << 20


def _call_dict(c: Call) -> dict[str, Any]:
    return {"group": c.group, "seq": c.seq, "op": c.op, "reduce_op": c.reduce_op,
            "in_shapes": [list(s) for s in c.in_shapes],
            "out_shapes": [list(s) for s in c.out_shapes], "dtypes": list(c.dtypes),
            "peer": c.peer, "flags": c.flags, "callsite": c.callsite, "t_start": c.t_start,
            "t_end": c.t_end, "aux": c.aux, "kind": int(c.kind),
            "framework_site": c.framework_site, "origin": c.origin.value,
            "iteration": c.iteration}


def facts_of(runs: dict[int, RankRun]) -> dict[str, Any]:
    """The ranks of a JobView built from outside facts, as RUN_DIR/facts.json holds them
    (``relative_seq``: its seqs come from stacks alone, 0 = the call now)."""
    ranks = []
    for run in (runs[r] for r in sorted(runs)):
        h = run.header
        calls = [c for cs in run.calls.values() for c in cs] + list(run.p2p)
        ranks.append({
            "rank": run.rank, "pid": h.pid, "host": h.host, "world_size": h.world_size,
            "local_rank": h.local_rank, "state": h.state.name, "started_ns": h.started_ns,
            "alive": run.alive, "proc_state": run.proc_state, "cpu_busy": run.cpu_busy,
            "stack": run.stack,
            "stack_error": run.stack_error, "group_ranks": run.group_ranks,
            "relative_seq": not run.seq_known,
            "calls": [_call_dict(c) for c in calls],
            "marks": [{"op": m.op, "t_start": m.t_start, "t_end": m.t_end,
                       "callsite": m.callsite} for m in run.trace.records
                      if m.kind == L.RecordKind.MARK]})
    return {"schema": FACTS_SCHEMA, "ranks": ranks}


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(x) for x in s) for s in value)


def _call_from(rank: int, d: dict[str, Any]) -> Call:
    return Call(rank=rank, group=str(d["group"]), seq=int(d["seq"]), op=str(d["op"]),
                reduce_op=str(d["reduce_op"]), in_shapes=_shapes(d["in_shapes"]),
                out_shapes=_shapes(d["out_shapes"]), dtypes=tuple(str(x) for x in d["dtypes"]),
                peer=int(d["peer"]), flags=int(d["flags"]), callsite=str(d["callsite"]),
                t_start=int(d["t_start"]), t_end=int(d["t_end"]), aux=int(d["aux"]),
                kind=L.RecordKind(int(d["kind"])),
                framework_site=str(d.get("framework_site", "")),
                origin=Origin(d.get("origin", Origin.USER.value)),
                iteration=int(d.get("iteration", -1)))


def _run_from(path: Path, d: dict[str, Any]) -> RankRun:
    rank = int(d["rank"])
    calls: dict[str, list[Call]] = {}
    for c in d.get("calls") or []:
        call = _call_from(rank, c)
        calls.setdefault(call.group, []).append(call)
    marks = [mark_record(str(m["op"]), int(m["t_start"]), int(m["t_end"]),
                         str(m.get("callsite", ""))) for m in d.get("marks") or []]
    group_ranks = {str(g): [int(r) for r in m] for g, m in (d.get("group_ranks") or {}).items()}
    run = external_run(rank, int(d["world_size"]), int(d["pid"]), str(d["host"]), path,
                       calls, group_ranks, int(d.get("started_ns") or 0),
                       int(d.get("local_rank", -1)), marks=marks,
                       state=L.RankState[str(d.get("state", "COMPUTING"))])
    stack = d.get("stack")
    run.stack = [f for f in stack if isinstance(f, dict)] if isinstance(stack, list) else None
    run.stack_error = d.get("stack_error") if isinstance(d.get("stack_error"), str) else None
    run.alive = d.get("alive") if isinstance(d.get("alive"), bool) else None
    run.proc_state = str(d.get("proc_state") or "")
    run.cpu_busy = d.get("cpu_busy") if isinstance(d.get("cpu_busy"), bool) else None
    run.seq_known = d.get("relative_seq") is not True
    return run


def load_facts(run_dir: Path, problems: list[str]) -> dict[int, RankRun]:
    """The ranks of RUN_DIR/facts.json ({} when there is none; a damaged file or rank is
    noted in ``problems`` and skipped)."""
    path = run_dir / FACTS_FILE
    try:
        data = load_json(read_file(path, MAX_FACTS_BYTES), path)
    except FileNotFoundError:
        return {}
    except BadInput as e:
        if not e.damaged:
            raise  # a FIFO, a device, a link or a huge file: exit 2
        problems.append(f"{path} is not valid JSON: its ranks are skipped")
        return {}
    except OSError as e:
        problems.append(f"cannot read {path}: {e.strerror or e}")
        return {}
    data = clean_value(data)  # its text is shown: no control character survives
    entries = data.get("ranks") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        problems.append(f"{path} holds no list of ranks: skipped")
        return {}
    runs: dict[int, RankRun] = {}
    for d in entries:
        try:
            run = _run_from(path, d)
        except (KeyError, TypeError, ValueError, AttributeError):
            problems.append(f"{path}: a damaged rank entry was skipped")
            continue
        runs[run.rank] = run
    return runs
