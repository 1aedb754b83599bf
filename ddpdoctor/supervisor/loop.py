"""Supervisor: watch the running job, catch hangs, failures and mismatches, write the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console
from rich.markup import escape

from ddpdoctor.analysis.causal.verdict import MISMATCH_SETTLE_S
from ddpdoctor.config import RunConfig
from ddpdoctor.proc.control import JobTree
from ddpdoctor.proc.signals import (ENDING_SIGNALS, OutputWatch, describe, say_to_stderr,
                                    signal_of)
from ddpdoctor.redact import redact_argv
from ddpdoctor.supervisor.ending import POLL_SECONDS, JobEnding, Verdict
from ddpdoctor.supervisor.live_state import LiveStateWriter
from ddpdoctor.supervisor.nodes import NodesMixin
from ddpdoctor.supervisor.os_wait import sample_idle
from ddpdoctor.supervisor.progress import ProgressTracker
from ddpdoctor.supervisor.stacks import capture_stacks
from ddpdoctor.supervisor.watch import LiveJob
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.world import world_size
from ddpdoctor.rundir.safe_path import open_append

# While every rank of a one-node job runs and none waits, the loop looks 4 times a second
# instead of 10: on a machine whose cores the ranks fill, each look takes a core from a rank
# and, in a job whose ranks step together, delays every rank (bench/README.md).
STEADY_POLL_SECONDS = 0.25
STEADY_WAIT_S = 0.1  # a rank inside one call longer than this: back to POLL_SECONDS
PROCESS_CHECK_S = 0.25  # between /proc checks of the ranks' liveness (and of the membership)
JUDGE_AFTER_S = 1.0  # a rank blocked this long: build the job view and judge it
JUDGE_EVERY_S = 1.0
PROGRESS_S = 0.5  # between samples of the ranks' CPU time
TREE_CHECK_S = 2.0  # between two looks at the job's process tree (the stop looks again)
TREE_SHARE = 0.005  # at most this share of the time goes to those looks (they read all of
# /proc: a busy node's thousands of processes cost tens of milliseconds a look)


class Supervisor(JobEnding, NodesMixin):
    """Runs beside the job (the job is ``proc``, its own process group)."""

    def __init__(self, config: RunConfig, run_dir: Path, proc: subprocess.Popen,
                 report_path: Path, console: Console, started_ns: int):
        self.config = config
        self.run_dir = run_dir
        self.proc = proc
        self.report_path = report_path
        self.console = console
        self.started_ns = started_ns
        self.live = LiveJob(run_dir)
        self.live_state = LiveStateWriter(run_dir)  # RUN_DIR/live.json, for a live UI
        self.tree = JobTree((proc.pid,))
        self.stopped: dict[str, Any] | None = None
        self.stop_requested = threading.Event()
        self.stop_signal: int = signal.SIGINT  # what asked for the stop (see request_stop)
        self.output = OutputWatch()  # ddpdoctor's stdout and stderr, closed by their reader?
        self._log_fd: int | None = None
        self._warned_mismatch = False
        self._failure_seen_at: float | None = None
        self._last_counts: tuple = ()
        self.report: dict[str, Any] | None = None
        self.quiet = config.ui  # the UI shows everything while it runs
        self._uneven_said = False
        self._due = {"tree": 0.0, "progress": 0.0, "processes": 0.0}  # monotonic times
        self._next_prediction = 0.0
        self.progress = ProgressTracker()
        self._next_judge = 0.0
        self._stacks_early = False
        self.judged_hung = False  # the causal model's hang rule has spoken (see _judge)
        self._stragglers_said: set[tuple[int, ...]] = set()
        self._membership: tuple[int, int] | None = None
        self._os_waits: dict[int, tuple] = {}  # pid -> what its last os_wait event said

    # -- supervisor.jsonl -----------------------------------------------------------
    def log(self, event: str, **fields: Any) -> None:
        """Append an event to RUN_DIR/supervisor.jsonl (read back by `analyze`)."""
        fields.update(event=event, t=time.time_ns())
        try:
            if self._log_fd is None:
                self._log_fd = open_append(self.run_dir / "supervisor.jsonl")
            os.write(self._log_fd, (json.dumps(fields, default=str) + "\n").encode())
        except OSError as e:
            self.live.problems.append(f"cannot write supervisor.jsonl: {e.strerror or e}")

    def say(self, text: str, style: str = "") -> None:
        """One line on the console; ``text`` is plain (a rank's error text can hold what
        rich would read as markup, e.g. gloo's ``[/__w/...pair.cc:553]``)."""
        if not self.quiet:
            self.console.print(f"[bold]ddpdoctor:[/bold] {escape(text)}", style=style,
                               highlight=False)

    # -- the loop --------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until the job ends (or is stopped); returns ddpdoctor's exit status."""
        self.log("start", pid=self.proc.pid, command=redact_argv(self.config.command))
        try:
            verdict = self._watch()
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP (proc.signals.Interrupted)
            verdict = Verdict("interrupt", describe(signal_of(e)), signal_of(e))
        with self._finishing():
            if verdict is None:
                return self._finish_ended()
            return self._finish_verdict(verdict)

    @contextmanager
    def _finishing(self) -> Iterator[None]:
        """While the report is written and the job stopped, a further Ctrl-C (or SIGTERM)
        does not cut that short: it only asks to stop a job ddpdoctor waits for."""
        if threading.current_thread() is not threading.main_thread():
            yield  # the UI's thread owns the signals; it sets stop_requested
            return

        def again(signum: int, frame: Any) -> None:
            if not self.stop_requested.is_set():
                say_to_stderr("ddpdoctor: stopping the job and writing the report, one "
                              "moment")
            self.request_stop(signum)

        previous = {sig: signal.signal(sig, again) for sig in ENDING_SIGNALS
                    if signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Ask the loop to end the run as interrupted by ``signum`` (the first asker's
        signal stands); safe from a signal handler or another thread."""
        if not self.stop_requested.is_set():
            self.stop_signal = signum
        self.stop_requested.set()

    def _watch(self) -> Verdict | None:
        while True:
            if self.stop_requested.is_set():
                return Verdict("interrupt", "stopped on request", self.stop_signal)
            gone = self.output.ending_signal()  # `| head` exited, the `tee` was killed
            if gone is not None:
                return Verdict("interrupt", describe(gone), gone)
            if self.proc.poll() is not None:
                return None
            self.live.poll()
            verdict = self._check()
            if verdict is not None:
                return verdict
            self.live_state.publish(self)
            time.sleep(STEADY_POLL_SECONDS if self._steady() else POLL_SECONDS)

    def _is_due(self, what: str, every_s: float) -> bool:
        """Is the periodic check ``what`` due (then it is next due ``every_s`` from now)?"""
        now = time.monotonic()
        if now < self._due[what]:
            return False
        self._due[what] = now + every_s
        return True

    def _steady(self) -> bool:
        """One node, every rank running, none inside a call for long, nothing seen amiss."""
        if self.leader is not None or self.follower is not None or \
                self._failure_seen_at is not None or self._warned_mismatch or \
                self.stop_requested.is_set():
            return False
        return self.live.steady(STEADY_WAIT_S)

    def _check(self) -> Verdict | None:
        if self._is_due("tree", TREE_CHECK_S):
            began = time.monotonic()
            self.tree.snapshot()  # every process of the job, remembered for the stop
            took = time.monotonic() - began
            self._due["tree"] = max(self._due["tree"], began + took / TREE_SHARE)
        if self._is_due("progress", PROGRESS_S):
            self._sample_progress()
        if self._is_due("processes", PROCESS_CHECK_S):
            self._check_membership()
            verdict = self._check_processes()
            if verdict is not None:
                return verdict
        if self.leader is not None:
            self.check_leader()
        if self.follower is not None:
            self.serve_nodes()
            if self.following:
                return self._node0_verdict()
        return self._check_traces()

    def _node0_verdict(self) -> Verdict | None:
        """A follower's verdict is node 0's: stop when node 0 stops the job."""
        v = self.follower.verdict if self.follower is not None else None
        if not isinstance(v, dict) or not v.get("stop"):
            return None
        return Verdict("node0", f"node 0: {v.get('message', 'the job is stopped')}")

    def _check_processes(self) -> Verdict | None:
        """Ranks that died or were stopped (read from /proc a few times a second)."""
        live = self.live
        for p in live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)
            if not p.exited_clean:
                self.say(f"rank {p.rank} (pid {p.header.pid}) died", "red")
                if self._failure_seen_at is None:
                    self._failure_seen_at = time.monotonic()
                    self._capture("failure")
        for p in live.stopped():
            if not p.stop_logged:
                p.stop_logged = True
                self.log("rank_stopped", pid=p.header.pid, rank=p.rank)
        return None

    def _check_traces(self) -> Verdict | None:
        """A first look at a mismatch (said at once), predictions, then the causal model's
        verdict: the one rule that stops the job."""
        live = self.live
        counts = tuple(p.read_upto for p in live.procs.values())
        changed, self._last_counts = counts != self._last_counts, counts
        div = live.divergence() if changed and not self._warned_mismatch else None
        if div is not None:
            self._warned_mismatch = True
            self.say(f"collectives diverge at seq {div.seq} (group {div.group}): "
                     + "; ".join(f"rank {r} {c.describe()} at {c.short_site}"
                                 for r, c in div.calls.items()), "yellow")
        self._predict()
        return self._judge()

    def _check_membership(self, final: bool = False) -> None:
        """Nodes and world size: recorded when first known and at every change (an elastic
        job's node joining or leaving, a restart with another world size); ``final``, as
        the report is written: a job whose ranks all ran between two looks gets it too."""
        if self.follower is not None and self.follower.linked:
            return  # node 0 records it for the whole job
        ranks = [p for p in self.live.ranks().values() if not p.gone]
        if not ranks and final and self._membership is None:
            ranks = list(self.live.ranks().values())
        world = world_size((p.header.rank, p.header.world_size) for p in ranks)
        if world <= 0:
            return
        members = self.leader.members() if self.leader is not None else None
        now = (len(members) if members else 1, world)
        if now == self._membership:
            return
        if self._membership is not None:
            self.say(f"membership changed: {now[0]} node(s), world size {world} (was "
                     f"{self._membership[0]} node(s), world size {self._membership[1]})",
                     "yellow")
        self._membership = now
        self.log("membership", nodes=now[0], world_size=world,
                 attempt=getattr(self, "attempt", 0), members=members or ["0"])

    def _sample_progress(self) -> None:
        self.progress.sample((p.rank, p.header.pid, p.header.count)
                             for p in self.live.local_ranks().values() if not p.gone)

    def _needs_judging(self) -> bool:
        """Build the full job view only when the live view sees something to judge: a rank
        blocked (in a call or in the rendezvous) past a short threshold (or past the
        mismatch settle time once a divergence was seen, or at all once a rank exited), a
        rank that died a hang timeout ago, or ranks still starting after it."""
        longest = self.live.longest_wait()
        short = min(JUDGE_AFTER_S, self.config.hang_timeout / 2)
        if self._warned_mismatch or any(p.gone and p.exited_clean
                                        for p in self.live.ranks().values()):
            short = min(short, MISMATCH_SETTLE_S)
        if longest is not None and longest[2] >= short:
            return True
        if self._failure_seen_at is not None and \
                time.monotonic() - self._failure_seen_at > self.config.hang_timeout:
            return True
        ranks = self.live.ranks().values()
        age = (time.time_ns() - self.started_ns) / 1e9
        starting = not ranks or any(p.header.state == L.RankState.STARTING for p in ranks)
        return starting and age >= self.config.hang_timeout

    def _judge(self) -> Verdict | None:
        """The causal model's hang rule, at most once a second while some rank is blocked."""
        now = time.monotonic()
        if now < self._next_judge or not self._needs_judging():
            return None
        self._next_judge = now + JUDGE_EVERY_S
        from ddpdoctor.analysis.causal.verdict import HangVerdict, Straggling, judge
        from ddpdoctor.analysis.load.run_dirs import load_job
        from ddpdoctor.proc.table import live_state
        from ddpdoctor.report.build import LIVE_TAIL

        try:
            sample_idle(self.live, self.progress, self.log, self._os_waits)
            job = load_job([self.run_dir], live=True, hang_timeout=self.config.hang_timeout,
                           tail=LIVE_TAIL, probe=live_state)
            self.progress.apply(job)
            self.nodes_progress(job)
            found = judge(job, self.config.hang_timeout)
            if found is None and not self._stacks_early:
                found = judge(job, self.config.hang_timeout / 2)  # halfway: where are they?
                if isinstance(found, HangVerdict):
                    self._capture_absent(found.absent)
                found = None
        except Exception as e:  # noqa: BLE001 - a model bug must not stop the supervision
            self.live.problems.append(f"hang check failed: {type(e).__name__}: {e}")
            return None
        if isinstance(found, Straggling):
            if found.ranks not in self._stragglers_said:
                self._stragglers_said.add(found.ranks)
                found = self._with_frames(found)
                self.say(found.message + " (a straggler so far: a hang if they still wait "
                         f"at the wait bound, {self.config.bound:g} s)",
                         "yellow")
                self.log("straggler", ranks=list(found.ranks), message=found.message)
            return None
        if isinstance(found, HangVerdict):
            self.judged_hung = True  # live.json shows its waiting ranks hung from now on
            if not self._stacks_early and found.reason == "hang":
                self._capture_absent(found.absent)
            self.log("progress", ranks=self.progress.event())
            return Verdict("hang" if found.reason == "failed" else found.reason, found.message)
        return None

    def _with_frames(self, found: Any) -> Any:
        """The straggler notice again, once the stragglers' stacks say where they compute."""
        from ddpdoctor.analysis.causal.verdict import Straggling, judge
        from ddpdoctor.analysis.load.run_dirs import load_job
        from ddpdoctor.proc.table import live_state
        from ddpdoctor.report.build import LIVE_TAIL

        live = self.live.local_ranks()
        pids = [live[r].header.pid for r in found.ranks if r in live]
        capture_stacks(pids, self.run_dir / "stacks")
        self.log("stacks", why="straggler", pids=pids)
        self.remote_stacks(list(found.ranks))
        try:
            job = load_job([self.run_dir], live=True, hang_timeout=self.config.hang_timeout,
                           tail=LIVE_TAIL, probe=live_state)
            self.progress.apply(job)
            self.nodes_progress(job)
            again = judge(job, self.config.hang_timeout)
        except Exception as e:  # noqa: BLE001 - the first notice is still worth saying
            self.live.problems.append(f"straggler check failed: {type(e).__name__}: {e}")
            return found
        return again if isinstance(again, Straggling) else found

    def _capture_absent(self, ranks: tuple[int, ...]) -> None:
        """Stacks of the ranks others wait on, taken before the verdict."""
        self._stacks_early = True
        live = self.live.local_ranks()
        pids = [live[r].header.pid for r in ranks if r in live and not live[r].gone]
        if pids:
            capture_stacks(pids, self.run_dir / "stacks")
            self.log("stacks", why="absent", pids=pids)
        self.remote_stacks(list(ranks))

    def _predict(self) -> None:
        """Once a second: do the ranks' loaders already promise uneven batch counts?"""
        now = time.monotonic()
        if self._uneven_said or now < self._next_prediction:
            return
        self._next_prediction = now + 1.0
        try:
            from ddpdoctor.analysis.causal.uneven import predict_uneven

            finding = predict_uneven(self.run_dir)
        except Exception as e:  # noqa: BLE001 - a prediction is a bonus, never a failure
            self._uneven_said = True
            self.live.problems.append(f"uneven-batch prediction failed: {e}")
            return
        if finding is not None:
            self._uneven_said = True
            self.log("prediction", kind=finding.kind, ranks=list(finding.ranks),
                     summary=finding.summary)
            self.say(f"warning: {finding.summary}", "yellow")
