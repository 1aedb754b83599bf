"""attach: py-spy frames and stack samples in, a JobView and findings out (no job launched);
finding rank processes in /proc (real processes, no torch)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from ddpdoctor.analysis.load import fr_dumps
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.analysis.model import Severity
from ddpdoctor.analysis.load.external import FACTS_FILE, facts_of
from ddpdoctor.attach.command import stuck_calls_only
from ddpdoctor.attach.discover import RankProcess, find_ranks, rank_process
from ddpdoctor.attach.frames import place_of
from ddpdoctor.attach.job import (StackSample, ThreadActivity, build_job, last_ran_ns,
                                  rank_facts)
from ddpdoctor.errors import UserError
from ddpdoctor.proc.table import descendants, scan
from ddpdoctor.supervisor import os_wait
from ddpdoctor.trace import layout as L
from tests.unit.flight_recorder_factory import entry, write_dump

TORCH = "/usr/lib/python3.11/site-packages/torch/distributed"
C10D = f"{TORCH}/distributed_c10d.py"
LOGGER = f"{TORCH}/c10d_logger.py"
TRAIN = textwrap.dedent("""\
    import time
    import torch.distributed as dist
    rank = dist.get_rank()
    dist.all_reduce(t)
    if rank == 0:
        dist.barrier()
    dist.all_reduce(t)
    time.sleep(100)
""")


def frame(name: str, filename: str, line: int) -> dict:
    return {"name": name, "filename": filename, "line": line}


def in_call(op: str, script: Path, line: int) -> list[dict]:
    """A main thread inside torch.distributed.<op>, called from script:line."""
    return [frame(op, C10D, 4000), frame("_exception_logger.<locals>.wrapper", LOGGER, 83),
            frame("<module>", str(script), line)]


def at_line(script: Path, line: int) -> list[dict]:
    return [frame("<module>", str(script), line)]


def process(rank: int) -> RankProcess:
    return RankProcess(os.getpid() + 100_000 + rank, rank, 2, rank, ("job",), ())


def job_of(stacks_by_sample: list[dict[int, list[dict]]], tmp_path: Path,
           switches: dict[int, list[int]] | None = None,
           last_ran: dict[int, int] | None = None, waits_on: dict[int, dict] | None = None):
    """A JobView from samples 1 s apart: {rank: frames} per sample; ``switches``: a rank's
    main-thread context switches at each sample (default: unknown); ``last_ran``: when its
    main thread last ran (ns); ``waits_on``: what the OS says it waits in."""
    procs = [process(r) for r in sorted(stacks_by_sample[0])]
    switches, last_ran, waits_on = switches or {}, last_ran or {}, waits_on or {}
    samples = [StackSample(1_000_000_000 * (i + 1),
                           {p.pid: {"pid": p.pid, "frames": s[p.rank]} for p in procs},
                           {p.pid: ThreadActivity(switches[p.rank][i], 0.0,
                                                  last_ran.get(p.rank))
                            for p in procs if p.rank in switches})
               for i, s in enumerate(stacks_by_sample)]
    facts = [rank_facts(p, samples, waits_on=waits_on.get(p.rank)) for p in procs]
    return build_job(facts, {}, samples, tmp_path, ["train.py"])


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_frames_give_the_outermost_collective_and_the_user_call_site(script):
    place = place_of(in_call("barrier", script, 6))
    assert (place.op, place.callsite, place.framework_site) == ("barrier", f"{script}:6", "")
    nested = [frame("all_gather", C10D, 3000), frame("all_gather_object", C10D, 3100),
              frame("training_step", "/x/site-packages/lightning/loop.py", 12),
              frame("train", str(script), 4)]
    place = place_of(nested)
    assert place.op == "all_gather_object" and place.callsite == f"{script}:4"
    assert place.framework_site == "/x/site-packages/lightning/loop.py:12"
    assert not place_of(at_line(script, 8)).in_call


def test_barrier_under_rank_branch_against_next_all_reduce_blames_rank_0(script, tmp_path):
    sample = {0: in_call("barrier", script, 6), 1: in_call("all_reduce", script, 7)}
    root = analyze(job_of([sample, sample, sample], tmp_path))[0]
    assert root.kind == "collective_mismatch" and root.ranks == (0,)
    assert root.evidence["calls"]["0"]["callsite"] == f"{script}:6"


def test_barrier_against_a_sleeping_rank_is_a_missing_collective_of_rank_0(script, tmp_path):
    sample = {0: in_call("barrier", script, 6), 1: at_line(script, 8)}
    findings = analyze(job_of([sample, sample, sample], tmp_path))
    root = findings[0]
    assert root.kind == "missing_collective" and root.ranks == (0,)
    assert "barrier" in root.summary and "train.py:8" in root.detail


def test_a_rank_that_just_entered_a_collective_is_not_waiting(script, tmp_path):
    computing = {0: at_line(script, 8), 1: at_line(script, 8)}
    entered = {0: in_call("all_reduce", script, 7), 1: at_line(script, 8)}
    findings = analyze(job_of([computing, computing, entered], tmp_path))
    assert not [f for f in findings if f.severity == Severity.ERROR]


def test_a_rank_whose_main_thread_moves_between_samples_is_not_stuck(script, tmp_path):
    """A loop that passes the same all_reduce line at every sample: progress, not a hang."""
    sample = {0: in_call("all_reduce", script, 7), 1: at_line(script, 8)}
    looping = {0: [100, 400, 700], 1: [50, 350, 650]}
    assert not [f for f in analyze(job_of([sample] * 3, tmp_path, looping))
                if f.severity == Severity.ERROR]
    blocked = {0: [100, 100, 101], 1: [50, 50, 50]}
    root = analyze(job_of([sample] * 3, tmp_path, blocked))[0]
    assert root.kind == "missing_collective" and root.ranks == (1,)  # rank 1 went elsewhere


def in_backward(script: Path, line: int) -> list[dict]:
    """A main thread in loss.backward() at script:line, held in the autograd engine (where
    DDP's reducer waits on its gradient all-reduce)."""
    torch = "/usr/lib/python3.11/site-packages/torch"
    return [frame("_engine_run_backward", f"{torch}/autograd/graph.py", 829),
            frame("backward", f"{torch}/autograd/__init__.py", 354),
            frame("backward", f"{torch}/_tensor.py", 647),
            frame("<module>", str(script), line)]


def test_a_rank_held_in_ddps_backward_waits_and_the_rank_branch_is_blamed(script, tmp_path):
    place = place_of(in_backward(script, 4))
    assert place.in_backward and place.callsite == f"{script}:4"
    sample = {0: in_call("barrier", script, 6), 1: in_backward(script, 4)}
    held = {0: [100, 100, 100], 1: [50, 50, 50]}  # neither main thread moves
    findings = analyze(job_of([sample] * 3, tmp_path, held))
    root = findings[0]
    assert root.kind == "collective_mismatch" and root.ranks == (0,), root.summary
    assert "DDP bucket" in root.summary
    assert not [f for f in findings if f.severity == Severity.ERROR and 1 in f.ranks]


def test_a_rank_computing_its_backward_is_not_waiting(script, tmp_path):
    sample = {0: in_call("all_reduce", script, 7), 1: in_backward(script, 4)}
    running = {0: [100, 100, 100], 1: [50, 450, 850]}
    findings = analyze(job_of([sample] * 3, tmp_path, running))
    assert not [f for f in findings if f.severity == Severity.ERROR and 1 in f.ranks]


FUTEX = {"syscall": "futex", "wchan": "", "meaning": os_wait.MEANING["futex"]}


def test_a_rank_asleep_on_a_lock_is_blocked_as_run_says_not_computing(script, tmp_path):
    """The analysis's own rule (the os_wait facts run's supervisor logs), not attach's: a
    rank outside any call whose main thread did not move, in futex, is blocked."""
    sample = {0: in_call("all_reduce", script, 7), 1: at_line(script, 8)}
    still = {0: [100, 100, 100], 1: [50, 50, 50]}
    job = job_of([sample] * 3, tmp_path, still, waits_on={1: FUTEX})
    root = analyze(job)[0]
    assert root.kind == "missing_collective" and root.ranks == (1,)
    assert "blocked in futex" in root.summary and "computing" not in root.summary
    assert "raise the process group's timeout" not in root.fix
    moving = {0: [100, 100, 100], 1: [50, 350, 650]}  # its thread ran: a straggler
    busy = analyze(job_of([sample] * 3, tmp_path, moving, waits_on={1: FUTEX}))
    assert not [f for f in busy if f.severity == Severity.ERROR or "futex" in f.summary]


def test_the_wait_counts_from_when_the_main_thread_fell_asleep(script, tmp_path):
    sample = {0: in_call("all_reduce", script, 7), 1: at_line(script, 8)}
    still = {0: [100, 100, 100], 1: [50, 50, 50]}
    asleep_at = 1_000_000_000 - 15_000_000_000  # 15 s before the first sample
    job = job_of([sample] * 3, tmp_path, still, last_ran={0: asleep_at, 1: asleep_at})
    assert job.ranks[0].open_call().t_start == asleep_at
    assert "Waiting for 17.0 s." in analyze(job)[0].detail  # to the last sample, 2 s later
    moving = {0: [100, 400, 700], 1: [50, 50, 50]}
    job = job_of([sample] * 3, tmp_path, moving, last_ran={0: asleep_at})
    assert job.ranks[0].open_call().t_start == 3_000_000_000  # it moved: the last sample


def test_last_ran_of_a_sleeping_process_is_when_it_fell_asleep():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.5)
        ran = last_ran_ns(sleeper.pid)
        assert ran is not None and 1.0 < (time.time_ns() - ran) / 1e9 < 30
    finally:
        sleeper.kill()
        sleeper.wait()


def test_healthy_ranks_in_the_same_collective_give_no_error(script, tmp_path):
    both = {0: in_call("all_reduce", script, 7), 1: in_call("all_reduce", script, 7)}
    findings = analyze(job_of([both, both, both], tmp_path))
    assert not [f for f in findings if f.severity == Severity.ERROR]


@pytest.fixture
def fake_job():
    """A shell (the "launcher") with two children that carry RANK/WORLD_SIZE."""
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)'"
    cmd = (f"RANK=0 WORLD_SIZE=2 MASTER_PORT=1 {sleeper} & "
           f"RANK=1 WORLD_SIZE=2 MASTER_PORT=1 {sleeper} & wait")
    proc = subprocess.Popen(["sh", "-c", cmd], start_new_session=True)
    try:
        for _ in range(100):
            found = [p for p in sorted(descendants(scan(), [proc.pid])) if rank_process(p)]
            if len(found) == 2:
                break
            time.sleep(0.05)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_find_ranks_below_a_launcher_and_by_pid(fake_job):
    ranks = find_ranks([fake_job.pid])
    assert [r.rank for r in ranks] == [0, 1] and all(r.world_size == 2 for r in ranks)
    assert [r.rank for r in find_ranks([ranks[1].pid])] == [1]


def test_several_jobs_are_listed_with_their_commands_and_pids(fake_job):
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)'"
    other = subprocess.Popen(["sh", "-c", f"RANK=0 WORLD_SIZE=1 MASTER_PORT=2 {sleeper} & wait"],
                             start_new_session=True)
    try:
        for _ in range(100):
            if [p for p in descendants(scan(), [other.pid]) if rank_process(p)]:
                break
            time.sleep(0.05)
        with pytest.raises(UserError) as err:
            find_ranks([fake_job.pid, other.pid])
        said = str(err.value)
        assert "found 2 jobs" in said and "ddpdoctor attach PID" in said
        for launcher in (fake_job, other):
            ranks = sorted(p for p in descendants(scan(), [launcher.pid]) if rank_process(p))
            line = next(x for x in said.splitlines() if f"launcher {launcher.pid}:" in x)
            assert "sh -c" in line and all(str(p) in line for p in ranks), line
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()


def test_bad_pids_are_usage_errors(fake_job):
    with pytest.raises(UserError, match="no process with PID"):
        find_ranks([2 ** 22 + 12345])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        with pytest.raises(UserError, match="neither a rank"):
            find_ranks([other.pid])
    finally:
        other.kill()
        other.wait()


def test_a_rank_in_init_process_group_has_an_open_init_mark(script, tmp_path):
    sample = {0: in_call("init_process_group", script, 3), 1: in_call("barrier", script, 6)}
    job = job_of([sample, sample], tmp_path)
    starting, past = job.ranks[0].trace, job.ranks[1].trace
    assert starting.header.state == L.RankState.STARTING
    assert [(r.kind, r.op, r.open) for r in starting.records] == [
        (L.RecordKind.MARK, "init", True)]
    assert [(r.op, r.open) for r in past.records] == [("init", False)]
    assert job.ranks[0].calls == {} and job.ranks[1].open_call().op == "barrier"


def test_a_flight_recorder_dump_gives_the_seq_and_the_stack_the_line(script, tmp_path):
    procs = [process(0), process(1)]
    stacks = {0: in_call("barrier", script, 6), 1: in_call("all_reduce", script, 7)}
    samples = [StackSample(i * 1_000_000_000, {p.pid: {"frames": stacks[p.rank]}
                                               for p in procs}) for i in (1, 2)]
    dumps = {0: fr_dumps.load_dump(write_dump(tmp_path / "fr", 0, [
        entry(1), entry(2), entry(3, "barrier", sizes=[], retired=False)], 2)),
        1: fr_dumps.load_dump(write_dump(tmp_path / "fr", 1, [
            entry(1), entry(2), entry(3, retired=False)], 2))}
    job = build_job([rank_facts(p, samples) for p in procs], dumps, samples, tmp_path, [])
    root = analyze(job)[0]
    assert root.kind == "collective_mismatch" and root.seq == 2 and root.ranks == (0,)
    assert root.evidence["calls"]["0"]["callsite"] == f"{script}:6"


def test_saved_facts_give_analyze_the_same_root_cause(script, tmp_path):
    sample = {0: in_call("barrier", script, 6), 1: at_line(script, 8)}
    job = job_of([sample] * 3, tmp_path)
    run_dir = tmp_path / "node0"
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / FACTS_FILE).write_text(json.dumps(facts_of(stuck_calls_only(job))))
    offline = load_job([run_dir])
    assert sorted(offline.ranks) == [0, 1]
    assert offline.ranks[0].stack == job.ranks[0].stack
    live_root, offline_root = analyze(job)[0], analyze(offline)[0]
    assert (offline_root.kind, offline_root.ranks, offline_root.seq) == \
        (live_root.kind, live_root.ranks, live_root.seq) == ("missing_collective", (0,), 0)


def test_a_call_only_just_entered_is_not_saved_as_waiting(script, tmp_path):
    computing = {0: at_line(script, 8), 1: at_line(script, 8)}
    entered = {0: in_call("all_reduce", script, 7), 1: at_line(script, 8)}
    job = job_of([computing, computing, entered], tmp_path)
    run_dir = tmp_path / "node0"
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / FACTS_FILE).write_text(json.dumps(facts_of(stuck_calls_only(job))))
    assert not [f for f in analyze(load_job([run_dir])) if f.severity == Severity.ERROR]


def test_analyze_of_an_attach_run_dir_shows_no_relative_seq_nor_step(script, tmp_path):
    """Stacks alone tell the call a rank is in, not its seq nor its step: the report of the
    run dir (as `analyze` builds it) keeps them null, and the console shows ``?``, never
    ``None`` nor a relative ``#0``."""
    from ddpdoctor.report.build import build_report
    from ddpdoctor.report.console import print_summary

    sample = {0: in_call("barrier", script, 6), 1: at_line(script, 8)}
    job = job_of([sample] * 3, tmp_path)
    run_dir = tmp_path / "node0"
    (run_dir / "traces").mkdir(parents=True)
    (run_dir / FACTS_FILE).write_text(json.dumps(facts_of(stuck_calls_only(job))))
    report = build_report(run_dir, live=False)
    rank0 = report["ranks"][0]
    assert rank0["step"] is None and rank0["last_seq"] is None
    assert rank0["current"]["op"] == "barrier" and rank0["current"]["seq"] is None
    root = report["findings"][0]
    assert root["kind"] == "missing_collective" and root["seq"] is None
    assert "#0" not in root["summary"] + root["detail"]
    console = Console(file=io.StringIO(), soft_wrap=True, color_system=None)
    print_summary(report, None, console)
    shown = console.file.getvalue()
    assert "None" not in shown and "#0" not in shown and "barrier() #?" in shown, shown
