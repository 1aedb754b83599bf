"""What a run dir says each rank did, as the steps a replay performs: ReplayJob, RankPlan, Step."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.analysis.load.user_source import rank_condition
from ddpdoctor.analysis.model import NS, Call, JobView, RankRun
from ddpdoctor.errors import UserError
from ddpdoctor.repro import loaders
from ddpdoctor.repro.ddp_replay import CONSTRUCTION_CHECK, with_real_ddp
from ddpdoctor.rundir.attempts import attempt_dirs
from ddpdoctor.repro.steps import Step, source_line
from ddpdoctor.trace.record import short_site
from ddpdoctor.trace import layout as L
from ddpdoctor.rundir.bounded import load_json_file
from ddpdoctor.trace.text import clean_value

MAX_MESSAGE = 300  # a crash's message is quoted up to this many characters


class Ending(str, enum.Enum):
    """How a rank's replay ends, after its last step.

    RETURNS: its program returned.
    HANGS: it was still inside its last call when the job ended (the replay waits there).
    CALL_FAILS: its last call raised (a peer's failure, a mismatch): the replay's does too.
    RAISES: it died of an exception outside any collective: the replay raises it there.
    STALLS: it was stuck outside any collective (computing, or blocked in its own code)
        when the job ended: the replay sleeps (or spins, if it was busy) there.
    NEVER_INIT: it never called init_process_group: it stalls before it.
    """

    RETURNS = "returns"
    HANGS = "hangs"
    CALL_FAILS = "call_fails"
    RAISES = "raises"
    STALLS = "stalls"
    NEVER_INIT = "never_init"


@dataclass(frozen=True)
class RankPlan:
    """One rank's replay: its steps in the order it made them, and how it ends."""

    rank: int
    steps: tuple[Step, ...]
    ending: Ending
    message: str = ""  # RAISES: the exception, one line
    busy: bool = False  # STALLS: it was using CPU (a straggler), not blocked
    destroys: bool = False  # it called destroy_process_group at its end


@dataclass(frozen=True)
class ReplayJob:
    """Everything a repro script needs from a run dir."""

    run_dir: Path
    world_size: int
    command: tuple[str, ...]
    started_at: str
    outcome: str
    groups: tuple[tuple[str, tuple[int, ...]], ...]  # created in this order, after init
    plans: tuple[RankPlan, ...]
    finding: str  # ddpdoctor's first finding, one line ("" when none)
    source: str  # "ddpdoctor run", "ddpdoctor attach", "torch flight recorder dumps"
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the replay cannot carry
    loaders: tuple[tuple[str, str], ...] = ()  # replay name, the user's line iterating it
    hang_timeout: float = 5.0  # `--hang-timeout` for running the replay (see replay_hang_timeout)


# A replay computes nothing between its calls: a rank inside one call for 5 s is hung, and
# the replay's finding comes in seconds rather than after the job's own (default 60 s).
REPLAY_HANG_TIMEOUT = 5.0


def replay_hang_timeout(job_hang_timeout: float | None) -> float:
    """The replay's hang timeout: the job's where it was shorter, else REPLAY_HANG_TIMEOUT."""
    if job_hang_timeout is None or job_hang_timeout <= 0:
        return REPLAY_HANG_TIMEOUT
    return min(job_hang_timeout, REPLAY_HANG_TIMEOUT)


def _step(call: Call, slot: int) -> Step:
    bucket = call.aux if call.flags & L.RecordFlag.BUCKET else -1
    return Step(call.op, call.group, call.reduce_op, call.in_shapes, call.out_shapes,
                call.dtypes, call.peer, call.kind == L.RecordKind.P2P,
                bool(call.flags & L.RecordFlag.OBJECT), bucket, slot, False,
                short_site(call.callsite), source_line(call.callsite), call.framework_site,
                rank_condition(call.callsite) is not None)


def construction_check(call: Call, step: Step, tables: list[dict[str, Any]]) -> Step:
    """DDP's construction check (ddp/swap.py records torch's
    ``_verify_params_across_processes`` as an all_gather without tensors) as that call with
    the shapes of the parameters the DDP reduces, from the parameter table recorded just
    before it; any other step as it is."""
    if call.op != "all_gather" or call.in_shapes or call.out_shapes or call.flags & (
            L.RecordFlag.OBJECT | L.RecordFlag.BUCKET):
        return step
    before = [t for t in tables if int(t.get("t") or 0) <= call.t_start]
    if not before:
        return step
    shapes = {str(p[0]): tuple(int(d) for d in p[1]) for p in before[-1].get("params") or []
              if isinstance(p, list) and len(p) == 3}
    reduced = tuple(shapes.get(str(n), (1,)) for n in before[-1].get("reducer") or [])
    return replace(step, op=CONSTRUCTION_CHECK, in_shapes=reduced,
                   dtypes=("float32",) * len(reduced))


def rank_steps(run: RankRun, loader_names: dict[int, str] | None = None) -> list[Step]:
    """The rank's collectives and p2p calls (every group) and DataLoader epochs, in the
    order it made them; an async call is followed, where its wait returned, by the wait
    (an async call never waited for is waited for at the end: the rank stood there or went
    past it)."""
    calls = [c for cs in run.calls.values() for c in cs] + list(run.p2p)
    calls.sort(key=lambda c: (c.t_start, c.seq))
    events: list[tuple[int, int, Any]] = []  # (time, order, call | (call,) wait | Step)
    for i, call in enumerate(calls):
        events.append((call.t_start, 2 * i, call))
        if call.flags & L.RecordFlag.ASYNC:
            events.append((call.t_end or 1 << 62, 2 * i + 1, (call,)))
    names = loader_names or {}
    for t, step in loaders.timed_steps(run, names):
        events.append((t, -1, step))
    events.sort(key=lambda e: (e[0], e[1]))
    steps: list[Step] = []
    slots: dict[int, int] = {}  # id of the call -> its slot while outstanding
    tables = run.trace.meta_events("ddp_params")
    for _, _, what in events:
        if isinstance(what, Step):
            steps.append(what)
        elif isinstance(what, tuple):
            waited = _step(what[0], slots.pop(id(what[0])))
            steps.append(Step(waited.op, waited.group, slot=waited.slot, wait=True,
                              site=waited.site, source=waited.source, p2p=waited.p2p))
        else:
            slot = -1
            if what.flags & L.RecordFlag.ASYNC:
                slot = min(set(range(len(slots) + 1)) - set(slots.values()))
                slots[id(what)] = slot
            steps.append(construction_check(what, _step(what, slot), tables))
    steps = loaders.add_unrecorded_batches(steps, loaders.drawn(run, names))
    steps = with_optimizer_steps(steps, run.header.step, open_last=run.open_call() is not None)
    return [replace(st, peer=-1) if st.op in loaders.OPS else st for st in steps]


OPTIMIZER_STEP = "optimizer_step"


def with_optimizer_steps(steps: list[Step], count: int, open_last: bool) -> list[Step]:
    """The rank's optimizer steps (its header counts them; they have no time of their own)
    put back after each completed run of DDP gradient buckets, up to that count."""
    out: list[Step] = []
    left = max(count, 0)
    buckets = {i for i, st in enumerate(steps) if st.bucket >= 0 or
               (st.wait and i > 0 and steps[i - 1].bucket >= 0)}
    ends = {i for i in buckets if i + 1 not in buckets or
            0 <= steps[i + 1].bucket <= steps[i].bucket}  # the next step's buckets begin
    if open_last and steps and len(steps) - 1 in ends:
        ends.discard(len(steps) - 1)  # still inside that step's backward
    for i, st in enumerate(steps):
        out.append(st)
        if i in ends and left:
            out.append(Step(OPTIMIZER_STEP, ""))
            left -= 1
    return out


def _failed_in_call(run: RankRun) -> bool:
    """Did the rank's exception come out of one of its calls (a failed or still open one)?"""
    calls = [c for cs in run.calls.values() for c in cs[-2:]] + run.p2p[-4:]
    return any(c.flags & L.RecordFlag.FAILED or c.open for c in calls)


def _message(exc: dict[str, Any]) -> str:
    kind = str(exc.get("type") or exc.get("exc_type") or "RuntimeError")
    text = str(exc.get("message") or exc.get("value") or exc.get("text") or "")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{kind.rsplit('.', 1)[-1]}: {first}"[:MAX_MESSAGE]


def _reached_init(run: RankRun) -> bool:
    """Did the rank call init_process_group (and, if it is still in there, wait for the
    others: the replay's init waits as well)?"""
    if any(m.op == "init" for m in run.marks):
        return True
    return bool(run.calls or run.p2p) or run.trace.header.state != L.RankState.STARTING


def plans_with_real_ddp(plans: tuple[RankPlan, ...]) -> tuple[RankPlan, ...]:
    """The plans, each rank's DDP replayed through a real DDP where every rank's buckets fit
    it (ddp_replay.with_real_ddp), else as they are."""
    steps = with_real_ddp(tuple(plan.steps for plan in plans))
    return tuple(replace(plan, steps=s) for plan, s in zip(plans, steps))


def as_stopped(run: RankRun) -> RankRun:
    """The rank as ddpdoctor's stop found it: a call it started after the stop is the stop's
    doing (a peer killed let go of the file lock it was blocked on, and it went on into its
    next call), not the job's; the same rank when it started none."""
    stop = run.stop_ns
    if stop is None:
        return run
    calls = {g: kept for g, cs in run.calls.items()
             if (kept := [c for c in cs if c.t_start < stop])}
    p2p = [c for c in run.p2p if c.t_start < stop]
    dropped = sum(map(len, run.calls.values())) - sum(map(len, calls.values()))
    return replace(run, calls=calls, p2p=p2p) if dropped or len(p2p) < len(run.p2p) else run


def rank_plan(run: RankRun, loader_names: dict[int, str] | None = None) -> RankPlan:
    """How one rank is replayed: its steps and its ending (see ``Ending``).  A rank that
    went on after the stop is replayed as the stop found it: inside its open call, or
    outside any (stalled there)."""
    stopped = as_stopped(run)
    if stopped is not run:
        steps = tuple(rank_steps(stopped, loader_names))
        if stopped.open_call() is not None:
            return RankPlan(run.rank, steps, Ending.HANGS)
        return RankPlan(run.rank, steps, Ending.STALLS, busy=run.cpu_busy is True)
    steps = tuple(rank_steps(run, loader_names))
    destroys = bool(run.trace.meta_events("destroy"))
    if not _reached_init(run):
        return RankPlan(run.rank, (), Ending.NEVER_INIT, busy=run.cpu_busy is True)
    exc = run.exception()
    if exc is None and not steps and any(m.op == "init" and not m.t_end for m in run.marks):
        return RankPlan(run.rank, steps, Ending.HANGS)  # still in init_process_group
    if exc is not None and not _failed_in_call(run):
        return RankPlan(run.rank, steps, Ending.RAISES, _message(exc))
    if exc is None and not run.fault and run.header.state in (
            L.RankState.COMPUTING, L.RankState.STARTING) and run.open_call() is None and \
            run.returncode is None:
        return RankPlan(run.rank, steps, Ending.STALLS, busy=run.cpu_busy is True)
    if exc is not None:
        return RankPlan(run.rank, steps, Ending.CALL_FAILS, _message(exc))
    if run.open_call() is not None and not run.exited_cleanly():
        return RankPlan(run.rank, steps, Ending.HANGS)
    return RankPlan(run.rank, steps, Ending.RETURNS, destroys=destroys)


def _groups(job: JobView) -> list[tuple[str, tuple[int, ...]]]:
    """Every process group but the default one, in the order torch named (created) them;
    a group no rank recorded the members of gets every rank (it was created, never used)."""
    members: dict[str, tuple[int, ...]] = {}
    default = {run.default_group() for run in job.ranks.values()}
    for run in job.ranks.values():
        for name, ranks in run.group_ranks.items():
            if name not in default:
                members.setdefault(name, tuple(ranks))
        for name in list(run.calls) + [c.group for c in run.p2p]:
            if name not in default and name not in members:
                members[name] = tuple(job.group_members(name))
    created = max((sum(1 for m in run.marks if m.op == "new_group")
                   for run in job.ranks.values()), default=0)
    for n in range(1, created + 1):
        if all(name.isdigit() for name in members) and str(n) not in members:
            members[str(n)] = tuple(range(job.world_size))
    return sorted(members.items(), key=lambda kv: (not kv[0].isdigit(),
                                                   int(kv[0]) if kv[0].isdigit() else 0,
                                                   kv[0]))


def first_finding(run_dir: Path) -> str:
    """The report's first error finding (else its first finding), one line."""
    try:
        report = clean_value(load_json_file(run_dir / "report.json", 256 << 20))
        findings = [f for f in report.get("findings", []) if isinstance(f, dict)]
    except (OSError, UserError, AttributeError):
        return ""
    errors = [f for f in findings if f.get("severity") == "error"] or findings
    if not errors:
        return ""
    f = errors[0]
    ranks = ", ".join(map(str, f.get("ranks") or []))
    return (f"{f.get('kind')} ({f.get('severity')}, rank{'s' if ',' in ranks else ''} {ranks}, "
            f"seq {f.get('seq')}): {f.get('summary', '')}")


def _source_of(run_dir: Path, job: JobView) -> str:
    if (run_dir / "facts.json").is_file():
        return "ddpdoctor attach"
    if not (run_dir / "run.json").is_file():
        return "torch flight recorder dumps"
    return "ddpdoctor run"


def _started(job: JobView) -> str:
    first = job.started_ns or min((r.header.started_ns for r in job.ranks.values()
                                   if r.header.started_ns), default=0)
    if not first:
        return "unknown"
    return dt.datetime.fromtimestamp(first / NS, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _notes(job: JobView, source: str) -> list[str]:
    notes = []
    lost = sorted(r for r, run in job.ranks.items() if run.trace.dropped)
    if lost:
        notes.append(f"rank(s) {', '.join(map(str, lost))} lost their oldest records to the "
                     "trace ring: the replay starts where their records start")
    missing = sorted(set(range(job.world_size)) - set(job.ranks))
    if missing:
        notes.append(f"rank(s) {', '.join(map(str, missing))} left no record: they only "
                     "join init_process_group and return")
    if source == "ddpdoctor attach":
        notes.append("attached from outside: where only the call a rank was in is known, "
                     "only that call is replayed")
    if any(run.batches for run in job.ranks.values()):
        notes.append("the data: each DataLoader epoch is replayed as a loader of as many "
                     "batches of distinct numbers, unshuffled (seeds, shuffles and duplicate "
                     "samples are not)")
    return notes


def read_job(run_dir: Path) -> ReplayJob:
    """The replay of ``run_dir``; UserError (exit 2) when it cannot be read or holds too
    little to replay."""
    if not run_dir.is_dir():
        raise UserError(f"no such run dir: {run_dir}", 2)
    attempts = attempt_dirs(run_dir)
    if attempts and not any((run_dir / "traces").glob("pid-*.ring")):
        run_dir = attempts[-1][1]  # a restarted job: its last attempt, as its report is
    job = load_job([run_dir], stacks=False)
    if not job.ranks:
        raise UserError(f"{run_dir} holds no rank's trace to replay: give the run dir that "
                        "`ddpdoctor run` or `ddpdoctor attach` wrote", 2)
    if not any(run.calls or run.p2p or any(m.op == "init" for m in run.marks)
               for run in job.ranks.values()):
        raise UserError(f"{run_dir} holds nothing to replay: {len(job.ranks)} rank(s) traced, "
                        "none reached init_process_group or a collective", 2)
    world = max(job.world_size, max(job.ranks) + 1)
    names = loaders.loader_names(list(job.ranks.values()))
    plans = plans_with_real_ddp(tuple(rank_plan(job.ranks[r], names) if r in job.ranks else
                                      RankPlan(r, (), Ending.RETURNS) for r in range(world)))
    source = _source_of(run_dir, job)
    return ReplayJob(run_dir, world, tuple(job.command), _started(job),
                     job.outcome or "unknown", tuple(_groups(job)), tuple(plans),
                     first_finding(run_dir), source, tuple(_notes(job, source)),
                     tuple(loaders.loader_sites(list(job.ranks.values()), names).items()),
                     replay_hang_timeout(job.hang_timeout))
