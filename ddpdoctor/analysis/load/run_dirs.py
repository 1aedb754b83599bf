"""Load one or more run dirs (one per node) into a JobView."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

from ddpdoctor.analysis.load import external as sources
from ddpdoctor.analysis.load import flight_recorder, fr_dumps
from ddpdoctor.analysis.load.flow import rank_flow
from ddpdoctor.analysis.load.implied import add_reducer_call
from ddpdoctor.analysis.load.stacks import attach_children, fault_text, load_stack
from ddpdoctor.analysis.model import NS, Call, JobView, NodeFacts, RankRun
from ddpdoctor.config import HANG_TIMEOUT
from ddpdoctor.errors import UserError
from ddpdoctor.host import host_name
from ddpdoctor.rundir.attempts import is_attempt_dir
from ddpdoctor.rundir.lint_results import read_lint_results
from ddpdoctor.rundir.layout import is_run_dir, read_run_file
from ddpdoctor.rundir.nodes import read_node_file, with_mirrors
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import RankTrace, TraceError, read_meta, read_trace
from ddpdoctor.trace.world import world_size
from ddpdoctor.trace.text import clean

SUPERVISOR_LOG = "supervisor.jsonl"


_MEMBER_LISTS: dict[tuple[int, ...], list[int]] = {}  # one list per distinct membership
_CHECKED: dict[int, list[int]] = {}  # id -> a list already checked (held, so ids stay unique)


def _members(value: Any) -> list[int] | None:
    """A group's member ranks as one list shared by every rank that names the same members
    (a world group of N ranks, listed by each of N ranks, is held and checked once, not N
    times; the meta reader already hands the same list to every rank that lists it)."""
    if _CHECKED.get(id(value)) is value:
        return value
    if not isinstance(value, list) or set(map(type, value)) - {int}:
        return None
    key = tuple(value)
    shared = _MEMBER_LISTS.get(key)
    if shared is None:
        if len(_MEMBER_LISTS) > 4096:
            _MEMBER_LISTS.clear()  # bounded: a long-lived supervisor sees many jobs
        shared = _MEMBER_LISTS[key] = value
    if len(value) >= 256:  # long lists come shared from the meta reader: check them once
        if len(_CHECKED) > 4096:
            _CHECKED.clear()
        _CHECKED[id(value)] = value
    return shared


def _group_ranks(trace: RankTrace) -> dict[str, list[int]]:
    """Group name -> its member ranks, from the trace's meta log."""
    ranks: dict[str, list[int]] = {}
    for idx, g in trace.groups().items():
        members = _members(g.get("ranks"))
        if members is not None:
            ranks[str(g.get("name", idx))] = members
    return ranks


def rank_run(trace: RankTrace) -> RankRun:
    """Split a rank's trace (its records as the reader gives them: rank, group name and
    iteration known) into calls by group, p2p calls, ring steps and batches."""
    group_ranks = _group_ranks(trace)
    rank = trace.header.rank
    calls: dict[str, list[Call]] = {}
    p2p: list[Call] = []
    ring, batches, marks = [], [], []
    for rec in trace.records:
        if rec.kind == L.RecordKind.COLLECTIVE:
            calls.setdefault(rec.group, []).append(rec)
        elif rec.kind == L.RecordKind.P2P:
            p2p.append(rec)
        elif rec.kind == L.RecordKind.RING_STEP:
            ring.append(rec)
        elif rec.kind == L.RecordKind.BATCH:
            batches.append(rec)
        elif rec.kind == L.RecordKind.MARK:
            marks.append(rec)
    for seq_calls in calls.values():
        seq_calls.sort(key=lambda c: c.seq)
    run = RankRun(rank, trace, calls, p2p, ring, batches, group_ranks)
    run.marks = marks
    run.flow = rank_flow(trace.records, trace.meta, trace.group_names())
    return run


def _read_traces(run_dir: Path, problems: list[str], tail: int | None = None,
                 read: dict[Path, RankTrace] | None = None) -> list[RankTrace]:
    traces = []
    for path in sorted((run_dir / "traces").glob("pid-*.ring")):
        trace = read.get(path) if read else None
        if trace is None:
            try:
                trace = read_trace(path, tail)
            except TraceError as e:
                problems.append(str(e))
                continue
        traces.append(trace)
    return traces


def _iso_ns(text: Any) -> int | None:
    try:
        return int(dt.datetime.fromisoformat(str(text)).timestamp() * NS)
    except (ValueError, OverflowError, OSError):
        return None


ProcProbe = Callable[[int], "str | None"]  # pid -> kernel state letter, None when gone


def load_job(run_dirs: list[Path], live: bool = False, hang_timeout: float | None = None,
             stacks: bool = True, tail: int | None = None,
             read: dict[Path, RankTrace] | None = None,
             probe: ProcProbe | None = None) -> JobView:
    """Read every trace of the run dirs (each rank's newest ``tail`` records if given; the
    traces in ``read`` as they are, e.g. from the fast scan's pass), and of the other
    nodes' mirrors that node 0 keeps inside them.  Raises UserError for a path that is no
    run dir.  A live view of this host's ranks asks ``probe`` (the supervisor's or the
    UI's, e.g. ``proc.table.live_state``) whether each rank's process still runs; analysis
    reads no /proc of its own.  With no ``hang_timeout``, the run's own (run.json), else
    the configuration's default."""
    for run_dir in run_dirs:
        if not run_dir.exists():
            raise UserError(f"no such run dir: {run_dir}")
    started: list[int] = []
    problems: list[str] = []
    ranks: dict[int, RankRun] = {}
    sup_events: list[dict[str, Any]] = []
    command: list[str] = []
    timeout = hang_timeout
    bound: float | None = None
    nodes: dict[str, NodeFacts] = {}
    all_launchers: list[RankTrace] = []
    here = host_name()
    dumped: list[int] = []  # when each directory of dumps alone was written
    for run_dir in with_mirrors(run_dirs):
        if run_dir.is_dir() and not is_run_dir(run_dir) and \
                fr_dumps.is_dump_dir(run_dir):
            dumps = fr_dumps.load_dump_dir(run_dir)
            fr_runs, _ = fr_dumps.rank_runs(dumps)
            for rank, run in fr_runs.items():
                ranks.setdefault(rank, run)
            dumped.append(fr_dumps.written_ns(dumps))
            continue
        if not run_dir.is_dir() or not is_run_dir(run_dir):
            raise UserError(f"not a ddpdoctor run dir (no run.json or traces/) nor a "
                            f"directory of torch flight recorder dumps: {run_dir}")
        info = read_run_file(run_dir)
        start = _iso_ns(info.get("started_at")) if info.get("started_at") else None
        if start:
            started.append(start)
        if not command and isinstance(info.get("command"), list):
            command = [clean(str(c)) for c in info["command"]]
        if timeout is None and isinstance(info.get("hang_timeout"), (int, float)):
            timeout = float(info["hang_timeout"])
        if bound is None and type(info.get("wait_bound")) in (int, float) and \
                info["wait_bound"] > 0:
            bound = float(info["wait_bound"])
        node = _node_facts(run_dir)
        if node is not None:
            nodes.setdefault(node.host, node)
        events, bad = read_meta(run_dir / SUPERVISOR_LOG)
        sup_events += events
        problems += bad
        here_ranks, launchers = _load_dir(run_dir, ranks, problems, tail, stacks, read)
        all_launchers += launchers
        _attach_exits(here_ranks, launchers, events,
                      probe if live and (node is None or node.host == here) else None)
        for rank, run in sources.load_facts(run_dir, problems).items():
            ranks.setdefault(rank, run)  # ranks ddpdoctor attach saw
        problems += flight_recorder.join_run_dir_dumps(run_dir, ranks)
    world = world_size((rank, r.header.world_size) for rank, r in ranks.items())
    _leave_out_unbelieved(ranks, world, problems)
    world = max(world, len(ranks))
    outcome = next((e.get("outcome") for e in reversed(sup_events)
                    if e.get("event") == "outcome"), None)
    # dumps alone: the job as it was when dumped (a wait is measured to then, not to now)
    now = max(dumped) if dumped and len(dumped) == len(run_dirs) else time.time_ns()
    job = JobView(list(run_dirs), ranks, world, now, timeout or HANG_TIMEOUT, live,
                  all_launchers, problems, sup_events, command, outcome,
                  min(started) if started else None, None if live else _ended(ranks, sup_events))
    job.nodes = nodes
    job.wait_bound = bound
    job.dumps_alone = bool(dumped) and len(dumped) == len(run_dirs)
    for run_dir in run_dirs[:1]:
        job.lint_sites = lint_sites(run_dir)
    return job


def _leave_out_unbelieved(ranks: dict[int, RankRun], world: int, problems: list[str]) -> None:
    """A trace whose header claims a rank beyond the world its headers make believable
    (``trace.world.world_size``: one header of a 3-rank job claiming rank 1,048,575) is no
    rank of this job: it is left out, said in ``problems``, and no finding names it."""
    for rank in [r for r in ranks if r >= world]:
        run = ranks.pop(rank)
        problems.append(f"{run.trace.path.name}: claims rank {rank:,} of a world of "
                        f"{run.header.world_size:,}, beyond what {len(ranks) + 1} trace(s) "
                        "make believable: left out")
    clipped: dict[int, list[int]] = {}  # id of a shared member list -> its believable part
    for run in ranks.values():
        for group, members in run.group_ranks.items():
            if members and max(members) >= world:
                if id(members) not in clipped:
                    clipped[id(members)] = [m for m in members if m < world]
                    problems.append(f"rank {run.rank}: group {group} lists ranks beyond the "
                                    f"world of {world:,}: left out of it")
                run.group_ranks[group] = clipped[id(members)]


RANK_DEPENDENT_LINT = ("rank_dependent_collective", "rank_dependent_stop", "rank_dependent_model",
                       "replica_drift")
SKIPPED = re.compile(r"skips \w+ \(line (\d+)\)")  # lint's rank_dependent_skip message


def lint_sites(run_dir: Path) -> dict[tuple[str, int], str]:
    """The lines lint flagged before the run as reaching a collective on some ranks only:
    the call (or the collective) it flagged, and for a ``return``/``continue`` that skips a
    collective on some ranks, that collective's line (reached on the other ranks only)."""
    sites: dict[tuple[str, int], str] = {}
    for f in read_lint_results(run_dir) or []:
        kind, path, line = f.get("kind"), f.get("file"), f.get("line")
        if not isinstance(path, str) or not isinstance(line, int):
            continue
        if kind in RANK_DEPENDENT_LINT:
            sites[(os.path.basename(path), line)] = str(kind)
        elif kind == "rank_dependent_skip":
            skipped = SKIPPED.search(str(f.get("message") or ""))
            if skipped:
                sites[(os.path.basename(path), int(skipped.group(1)))] = str(kind)
    return sites


def _node_facts(run_dir: Path) -> NodeFacts | None:
    """A node mirror's facts from its node.json (None for a node's own run dir)."""
    info = read_node_file(run_dir)
    if not info or not isinstance(info.get("host"), str):
        return None
    skew = info.get("clock_skew_ns")
    lost_at = info.get("lost_at_ns")
    return NodeFacts(str(info.get("node", info["host"])), info["host"],
                     skew if type(skew) is int else None, info.get("lost") is True,
                     lost_at if type(lost_at) is int else None)


def _file_names(folder: Path) -> set[str]:
    """The names in ``folder`` (one listing, not a failed open per rank of a big job)."""
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _load_dir(run_dir: Path, ranks: dict[int, RankRun], problems: list[str],
              tail: int | None, stacks: bool, read: dict[Path, RankTrace] | None = None
              ) -> tuple[list[RankRun], list[RankTrace]]:
    """The ranks of one run dir into ``ranks`` (a rank already read from an earlier dir, or
    an older incarnation of it, is not replaced); returns them and the dir's launchers."""
    launchers: list[RankTrace] = []
    mine: list[RankRun] = []
    faults, stack_files = _file_names(run_dir / "traces"), _file_names(run_dir / "stacks")
    for trace in _read_traces(run_dir, problems, tail, read):
        problems += trace.problems
        if trace.header.rank < 0:
            launchers.append(trace)
            continue
        old = ranks.get(trace.header.rank)
        if old is not None and old.trace.header.started_ns >= trace.header.started_ns:
            continue  # read already, or an earlier incarnation (a restart): keep the newest
        run = rank_run(trace)
        if trace.path.name.replace(".ring", ".fault.txt") in faults:
            run.fault = fault_text(trace)
        if stacks and f"pid-{trace.header.pid}.json" in stack_files:
            run.stack, run.stack_error = load_stack(
                run_dir / "stacks" / f"pid-{trace.header.pid}.json")
            add_reducer_call(run)
        ranks[trace.header.rank] = run
        mine.append(run)
    if stacks:
        attach_children(run_dir, mine, stack_files)
    if is_attempt_dir(run_dir):  # torchrun's agent (the launcher) spans the attempts
        launchers += [t for t in _read_traces(run_dir.parent, problems, tail)
                      if t.header.rank < 0]
    return mine, launchers


def _ended(ranks: dict[int, RankRun], sup_events: list[dict[str, Any]]) -> int | None:
    """When the job ended: the supervisor's verdict or outcome, else the last record."""
    for name in ("verdict", "outcome"):
        times = [e["t"] for e in sup_events if e.get("event") == name and
                 isinstance(e.get("t"), int)]
        if times:
            return min(times)
    last = [max(c.t_end or c.t_start for c in calls) for run in ranks.values()
            for calls in run.calls.values() if calls]
    return max(last) if last else None


def _attach_progress(ranks: dict[int, RankRun], sup_events: list[dict[str, Any]]) -> None:
    """The supervisor's last word on each rank's progress (interfaces: ``progress`` event)."""
    last = next((e for e in reversed(sup_events) if e.get("event") == "progress"), None)
    facts = last.get("ranks") if last is not None else None
    if not isinstance(facts, dict):
        return
    for key, fact in facts.items():
        run = ranks.get(int(key)) if str(key).isdigit() else None
        if run is None or not isinstance(fact, dict):
            continue
        if type(fact.get("progress_ns")) is int:
            run.progress_ns = fact["progress_ns"]
        if type(fact.get("cpu_busy")) is bool:
            run.cpu_busy = fact["cpu_busy"]


def _attach_exits(runs: list[RankRun], launchers: list[RankTrace],
                  sup_events: list[dict[str, Any]], probe: ProcProbe | None) -> None:
    """Exit codes, vanishings, stops and progress of one run dir's ranks, from that dir's
    launchers and supervisor log (pids and clocks are those of the dir's host)."""
    by_pid = {run.pid: run for run in runs}
    stop = next((e.get("t") for e in sup_events if e.get("event") == "stop"), None)
    for run in runs:
        run.stop_ns = stop if type(stop) is int else None

    def run_of(ev: dict[str, Any]) -> RankRun | None:
        pid = ev.get("pid")
        return by_pid.get(pid) if type(pid) is int else None  # damaged logs: any type

    for launcher in launchers:
        for ev in launcher.meta_events("child_exit"):
            run = run_of(ev)
            if run is not None and type(ev.get("returncode")) is int:
                run.returncode = ev["returncode"]
    for ev in sup_events:
        run = run_of(ev)
        if run is None:
            continue
        if ev.get("event") == "rank_gone" and run.gone_at_ns is None and \
                type(ev.get("t")) is int:
            run.gone_at_ns = ev["t"]
        if ev.get("event") == "rank_stopped":
            run.proc_state = "T"
    _attach_progress({run.rank: run for run in runs}, sup_events)
    if probe is not None:
        for run in runs:
            state = probe(run.pid)
            run.alive = state is not None
            if state is not None:
                run.proc_state = state
