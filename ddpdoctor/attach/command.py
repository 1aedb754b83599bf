"""`ddpdoctor attach`: sample every rank's stack, read flight recorder dumps, diagnose."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.causal.verdict import HangVerdict, judge
from ddpdoctor.analysis.engine import analyze_with_waits
from ddpdoctor.analysis.load.fr_dumps import FlightRecorderDump, load_dump
from ddpdoctor.analysis.model import NS, JobView, RankRun, Severity
from ddpdoctor.analysis.load.external import FACTS_FILE, facts_of
from ddpdoctor.attach.discover import RankProcess, find_ranks
from ddpdoctor.attach.job import (StackSample, build_job, main_thread_activity,
                                  process_state, rank_facts)
from ddpdoctor.attach.stop import job_roots, stop_job_tree, stopped_text
from ddpdoctor.errors import UserError
from ddpdoctor.analysis.load.run_dirs import SUPERVISOR_LOG
from ddpdoctor.rundir.layout import (RUN_FILE, make_run_dir, new_run_id, write_bytes_atomic,
                                     write_json_atomic)
from ddpdoctor.rundir.runs import hold_live
from ddpdoctor.report import schema
from ddpdoctor.report.build import infer_outcome
from ddpdoctor.report.stack_only import null_relative_seqs, stack_only_ranks
from ddpdoctor.proc.signals import say_to_stderr
from ddpdoctor.supervisor.os_wait import os_wait
from ddpdoctor.supervisor.stacks import capture_stacks, py_spy_path

SAMPLES = 3
INTERVAL_S = 1.0
EXIT_PROBLEM = 1


@dataclass(frozen=True)
class AttachConfig:
    """What `ddpdoctor attach` was asked to do.

    pids: launcher or rank PIDs (empty: find the job).  report / run_dir: where the report
    and the stacks go (None: defaults).  ui: open the TUI on the report.  stop: stop the
    whole job tree after the report.  samples / interval_s: stack samples and their gap.
    shown: what stdout gets: ``summary``, ``quiet`` (the verdict line and the report's
    path) or ``json`` (the report alone).
    """

    pids: tuple[int, ...] = ()
    report: Path | None = None
    run_dir: Path | None = None
    ui: bool = False
    stop: bool = False
    samples: int = SAMPLES
    interval_s: float = INTERVAL_S
    shown: str = "summary"

    def __post_init__(self) -> None:
        if self.samples < 2:
            raise ValueError("attach needs at least two stack samples")


def _command(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def sample_stacks(ranks: list[RankProcess], run_dir: Path, count: int,
                  interval_s: float) -> list[StackSample]:
    """``count`` rounds of py-spy dumps of every rank (in parallel), ``interval_s`` apart."""
    pids = [r.pid for r in ranks]
    samples = []
    for i in range(count):
        if i:
            time.sleep(interval_s)
        activity = {pid: main_thread_activity(pid) for pid in pids}
        t_ns = time.time_ns()
        samples.append(StackSample(t_ns, capture_stacks(pids, run_dir / "stacks"), activity))
    return samples


def read_dumps(ranks: list[RankProcess], problems: list[str]) -> dict[int, FlightRecorderDump]:
    """The flight recorder dumps the job wrote (TORCH_FR_DUMP_TEMP_FILE<rank>), if any.
    A job that ddpdoctor did not start cannot be made to dump: only what exists is read."""
    dumps = {}
    for r in ranks:
        prefix = r.getenv("TORCH_FR_DUMP_TEMP_FILE")
        if not prefix:
            continue
        path = Path(f"{prefix}{r.rank}")
        if not path.is_file():
            continue
        try:
            dump = load_dump(path)
        except UserError as e:
            problems.append(str(e))
            continue
        dumps[r.rank] = dataclasses.replace(dump, rank=r.rank)
    return dumps


def stuck_calls_only(job: JobView) -> dict[int, RankRun]:
    """The ranks without the calls they had only just entered at the last sample: offline
    (`ddpdoctor analyze` of the run dir) every open call counts as waiting."""
    threshold = job.now_ns - int(job.hang_timeout * NS)
    out = {}
    for rank, run in job.ranks.items():
        calls = {g: [c for c in cs if not c.open or c.t_start <= threshold]
                 for g, cs in run.calls.items()}
        out[rank] = dataclasses.replace(run, calls={g: cs for g, cs in calls.items() if cs},
                                        p2p=[c for c in run.p2p if not c.open or
                                             c.t_start <= threshold])
    return out


def _sources(dumps: dict[int, FlightRecorderDump], samples: list[StackSample],
             ranks: list[RankProcess]) -> dict[str, Any]:
    window = (samples[-1].t_ns - samples[0].t_ns) / 1e9
    fr = {str(r): str(d.path) for r, d in sorted(dumps.items())}
    return {"stacks": f"py-spy, {len(samples)} samples of every rank over {window:.1f} s",
            "flight_recorder": fr or None,
            "note": None if len(fr) == len(ranks) else
            "no flight recorder dump for some ranks (a running job cannot be made to dump): "
            "their current collective comes from the stack, with no sequence number"}


def run_attach(config: AttachConfig) -> int:
    """Diagnose the running job; the diagnosing commands' exit rule: 0 no finding of severity
    error, 1 at least one, 2 usage error."""
    if py_spy_path() is None:
        raise UserError("py-spy is not installed: pip install py-spy")
    ranks = find_ranks(list(config.pids))
    run_dir = make_run_dir(config.run_dir, new_run_id() + "-attach")
    hold_live(run_dir)  # `ddpdoctor runs prune` leaves it alone while this process runs
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
    command = _command(job_roots(ranks, list(config.pids))[0])  # the launcher's, if any
    write_json_atomic(run_dir / RUN_FILE, {"command": command, "started_at": started,
                                           "attached": [r.pid for r in ranks],
                                           "named_run_dir": config.run_dir is not None})
    samples = sample_stacks(ranks, run_dir, config.samples, config.interval_s)
    problems: list[str] = []
    dumps = read_dumps(ranks, problems)
    facts = [rank_facts(r, samples, process_state(r.pid), os_wait(r.pid)) for r in ranks]
    job = build_job(facts, dumps, samples, run_dir, command)
    job.problems.extend(problems)
    if len(ranks) < job.world_size:
        job.problems.append(
            f"{len(ranks)} of {job.world_size} ranks run on this node: attach on the other "
            "nodes too and merge the run dirs with `ddpdoctor analyze DIR...`")
    if isinstance(judge(job, job.hang_timeout), HangVerdict):
        job.outcome = "hung"  # the supervisor's one rule, over the sampling window
    findings, waits = analyze_with_waits(job)
    report = schema.build(job, findings, infer_outcome(job), waits=waits)
    findings = null_relative_seqs(report, findings, stack_only_ranks(job))
    report["sources"] = _sources(dumps, samples, ranks)
    report["main_thread_moved"] = {str(f.process.rank): f.moved for f in facts}
    path = config.report or run_dir / "report.json"
    try:
        write_json_atomic(run_dir / FACTS_FILE, facts_of(stuck_calls_only(job)))
        # what the OS said idle ranks wait in and the verdict, where `run`'s supervisor logs
        # them: analyze of this run dir judges alike
        verdict = [{"event": "outcome", "t": job.now_ns, "outcome": job.outcome,
                    "exit_code": None}] if job.outcome else []
        write_bytes_atomic(run_dir / SUPERVISOR_LOG, "".join(
            json.dumps(e) + "\n" for e in job.supervisor_events + verdict).encode())
        write_json_atomic(path, report)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}", 1) from None
    _show(report, path, config)
    if config.stop:
        stopped = stop_job_tree(job_roots(ranks, list(config.pids)))
        if stopped.survivors:
            raise UserError(f"{stopped_text(stopped)}; could not stop processes "
                            f"{', '.join(map(str, stopped.survivors))}", 1)
        say_to_stderr(f"ddpdoctor: {stopped_text(stopped)}")
    errors = any(f.severity == Severity.ERROR for f in findings)  # a warning alone: 0
    return EXIT_PROBLEM if errors else 0


def _show(report: dict[str, Any], path: Path, config: AttachConfig) -> None:
    if config.ui:
        from ddpdoctor.tui.app import run_ui

        run_ui(path)
        return
    from ddpdoctor.report.console import show_report, summary_console

    console = summary_console()
    show_report(report, path, console, config.shown)
    if config.shown != "summary":
        return
    sources = report.get("sources") or {}
    dumps = sources.get("flight_recorder")
    console.print(f"[dim]Sources: {sources.get('stacks')}; flight recorder: "
                  f"{'ranks ' + ', '.join(dumps) if dumps else 'no dump'}[/]")
