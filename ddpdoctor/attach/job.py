"""Build a JobView of a running job from stack samples and any flight recorder dumps."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.load.fr_dumps import FlightRecorderDump
from ddpdoctor.analysis.model import Call, JobView, RankRun
from ddpdoctor.analysis.load.external import DEFAULT_GROUP, external_run, mark_record
from ddpdoctor.attach.discover import RankProcess
from ddpdoctor.attach.frames import StackPlace, place_of
from ddpdoctor.proc.table import alive, proc_state


def process_state(pid: int) -> tuple[bool, str]:
    """(alive, kernel state letter) of a rank now."""
    up = alive(pid)
    return up, proc_state(pid) if up else ""
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from ddpdoctor.trace.record import CallRecord


# A main thread blocked in a collective neither switches nor burns CPU (measured: 0 and 0
# over 2 s on gloo); one that loops through collectives switches hundreds of times a second.
MOVED_SWITCHES = 10
MOVED_CPU_S = 0.05


@dataclass(frozen=True)
class ThreadActivity:
    """A main thread's context switches (voluntary + not) and CPU seconds so far, and when
    (wall clock, ns) it last started to run (None: /proc does not say)."""

    switches: int
    cpu_s: float
    last_ran_ns: int | None = None

    def moved_since(self, before: "ThreadActivity") -> bool:
        return (self.switches - before.switches > MOVED_SWITCHES or
                self.cpu_s - before.cpu_s > MOVED_CPU_S)


def _exec_start_ms(path: str) -> float | None:
    """``se.exec_start`` of a thread's /proc sched file: when it last started to run, in ms
    of the scheduler's clock (not the wall clock, not CLOCK_MONOTONIC on every host)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "se.exec_start":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def last_ran_ns(pid: int) -> int | None:
    """When (wall clock, ns) the main thread of ``pid`` last started to run: for a thread
    asleep in a wait, about when the wait began.  The scheduler's clock is read against this
    thread's own, which runs now."""
    theirs = _exec_start_ms(f"/proc/{pid}/task/{pid}/sched")
    ours = _exec_start_ms("/proc/thread-self/sched")
    if theirs is None or ours is None or theirs > ours:
        return None
    return time.time_ns() - int((ours - theirs) * 1e6)


def main_thread_activity(pid: int) -> ThreadActivity | None:
    """The main thread's activity counters from /proc, else None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        counts = {k: v.strip() for k, _, v in (line.partition(":")
                                               for line in status.splitlines())}
        fields = stat[stat.rfind(")") + 2:].split()
        return ThreadActivity(int(counts["voluntary_ctxt_switches"]) +
                              int(counts["nonvoluntary_ctxt_switches"]),
                              (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
                              last_ran_ns(pid))
    except (OSError, ValueError, IndexError, KeyError):
        return None


@dataclass
class StackSample:
    """Every rank's py-spy result at one moment (``t_ns``), by pid, and each rank's main
    thread activity read just before."""

    t_ns: int
    stacks: dict[int, dict[str, Any]]
    activity: dict[int, ThreadActivity | None] = field(default_factory=dict)


@dataclass
class RankFacts:
    """What attach learned about one rank: where each sample found it, and since when it
    has been stuck there (the first of the consecutive samples that agree, when its main
    thread did not move in between, or earlier: when that thread last ran before the first
    of them; else the last sample: it is making progress).  ``waits_on``: what the OS says
    a rank that did not move waits in outside any call (supervisor.os_wait's dict)."""

    process: RankProcess
    places: list[StackPlace] = field(default_factory=list)
    since_ns: int = 0
    frames: list[dict[str, Any]] | None = None
    stack_error: str | None = None
    moved: bool | None = None  # its main thread switched or ran over the samples
    alive: bool = True  # at the last sample
    proc_state: str = ""  # kernel state letter at the last sample (T = stopped)
    waits_on: dict[str, Any] | None = None


def rank_facts(process: RankProcess, samples: list[StackSample],
               state: tuple[bool, str] = (True, ""),
               waits_on: dict[str, Any] | None = None) -> RankFacts:
    """Fold the samples of one rank into its facts; ``state`` is (alive, kernel state),
    ``waits_on`` what the OS said it waits in at the end (os_wait), kept only for a rank
    that did not move, outside any call."""
    facts = RankFacts(process, alive=state[0], proc_state=state[1])
    last_key = None
    since: StackSample | None = None
    for sample in samples:
        result = sample.stacks.get(process.pid) or {}
        frames = result.get("frames")
        if not isinstance(frames, list):
            facts.stack_error = str(result.get("error") or "no stack")
            last_key = None
            continue
        place = place_of(frames)
        key = (place.op, place.callsite)
        if key != last_key:
            since, last_key = sample, key
        facts.places.append(place)
        facts.frames, facts.stack_error = frames, None
    if since is None:
        return facts
    facts.since_ns = since.t_ns
    first, last = since.activity.get(process.pid), samples[-1].activity.get(process.pid)
    if first is not None and last is not None:
        facts.moved = last.moved_since(first)
        if facts.moved:
            facts.since_ns = samples[-1].t_ns
        elif since is samples[0] and first.last_ran_ns is not None:
            facts.since_ns = min(facts.since_ns, first.last_ran_ns)  # asleep since then
    place = facts.places[-1] if facts.places else None
    if facts.moved is False and not (place is not None and place.in_call):
        facts.waits_on = waits_on
    return facts


def _stack_call(facts: RankFacts, seq: int) -> Call | None:
    """The collective the rank sits in at the last sample, as an open Call at ``seq``."""
    place = facts.places[-1] if facts.places else None
    if place is None or not place.in_call or place.kind == L.RecordKind.MARK:
        return None
    backward = place.in_backward  # DDP's gradient all-reduce, issued by its backward
    return Call(rank=facts.process.rank, group=DEFAULT_GROUP, seq=seq, op=place.op,
                callsite=place.callsite, t_start=facts.since_ns, t_end=0,
                aux=0 if backward else -1, kind=place.kind,
                flags=int(L.RecordFlag.BUCKET) if backward else 0,
                origin=Origin.DDP_BACKWARD if backward else Origin.USER)


def _merge_dump(facts: RankFacts, dump: FlightRecorderDump) -> dict[str, list[Call]]:
    """The dump's calls, the open one on the default group given the stack's call site."""
    calls = {g: list(cs) for g, cs in dump.calls.items()}
    place = facts.places[-1] if facts.places else None
    default = calls.get(DEFAULT_GROUP, [])
    if place is not None and place.in_call and default and default[-1].open and \
            (default[-1].op == place.op or not default[-1].op):
        default[-1] = dataclasses.replace(default[-1], callsite=place.callsite)
    return calls


def _start_ns(pid: int) -> int:
    """When the process started (wall clock), from /proc, else 0."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat[stat.rfind(")") + 2:].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return int((time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")) * 1e9)



def _rendezvous(facts: RankFacts) -> tuple[list[CallRecord], L.RankState]:
    """MARK records as the runtime writes them: a rank inside init_process_group (or
    new_group) now has an open ``init`` (``new_group``) mark and, in init, has not started;
    a rank inside a collective is past init."""
    place = facts.places[-1] if facts.places else None
    if place is None or not place.in_call:
        return [], L.RankState.COMPUTING
    if place.kind == L.RecordKind.MARK:
        op = "init" if place.op == "init_process_group" else "new_group"
        mark = mark_record(op, facts.since_ns, 0, place.callsite)
        return ([mark], L.RankState.STARTING if op == "init" else L.RankState.COMPUTING)
    return [mark_record("init", 0, 1)], L.RankState.COMPUTING


def rank_run(facts: RankFacts, dump: FlightRecorderDump | None, host: str) -> RankRun:
    """One rank of the JobView: calls from its dump if any, else its stack's current call
    at seq 0 on the default group (seqs from stacks alone are relative: "the call now")."""
    p = facts.process
    if dump is not None:
        calls = _merge_dump(facts, dump)
    else:
        current = _stack_call(facts, 0)
        calls = {DEFAULT_GROUP: [current]} if current else {}
    group_ranks = {g: list(range(p.world_size)) for g in calls}
    group_ranks[DEFAULT_GROUP] = list(range(p.world_size))
    if dump is not None:
        group_ranks.update({g: m for g, m in dump.group_ranks.items() if g != DEFAULT_GROUP})
    marks, state = _rendezvous(facts)
    run = external_run(p.rank, p.world_size, p.pid, host, Path(f"/proc/{p.pid}"), calls,
                       group_ranks, _start_ns(p.pid), p.local_rank, marks=marks, state=state)
    run.stack, run.stack_error = facts.frames, facts.stack_error
    run.alive, run.proc_state = facts.alive, facts.proc_state
    run.cpu_busy = facts.moved  # as the supervisor's sampling says it of a rank under `run`
    run.seq_known = dump is not None  # from the stack alone: seq 0 is the call it is in now
    return run


def os_wait_events(facts: list[RankFacts], t_ns: int) -> list[dict[str, Any]]:
    """What the OS said each idle rank waits in, as the supervisor logs it under `run`
    (``os_wait`` events): the analysis reads one rule for both."""
    return [{"event": "os_wait", "t": t_ns, "pid": f.process.pid, "rank": f.process.rank,
             **f.waits_on} for f in facts if f.waits_on]


def build_job(facts: list[RankFacts], dumps: dict[int, FlightRecorderDump],
              samples: list[StackSample], run_dir: Path, command: list[str]) -> JobView:
    """The job at the last sample.  hang_timeout is the sampling window: a rank counts as
    waiting when every sample found it in the same call."""
    host = socket.gethostname()
    ranks = {f.process.rank: rank_run(f, dumps.get(f.process.rank), host) for f in facts}
    world = max([f.process.world_size for f in facts] + [len(ranks)])
    first, last = samples[0].t_ns, samples[-1].t_ns
    window = max((last - first - 1) / 1e9, 1e-9)  # 1 ns below: a float never misses it
    started = [r.header.started_ns for r in ranks.values() if r.header.started_ns]
    return JobView([run_dir], ranks, world, last, window, True, command=command,
                   started_ns=min(started) if started else None,
                   supervisor_events=os_wait_events(facts, last))
