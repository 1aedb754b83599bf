"""AttemptWatch: the supervisor's watch over one attempt of the job (the whole job, when
torchrun does not restart it): its run dir, traces, log and live view, and what it has
judged so far.  A restart makes a fresh one: nothing of an attempt is reset by hand."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddpdoctor.analysis.causal.verdict import MISMATCH_SETTLE_S
from ddpdoctor.analysis.model import JobView
from ddpdoctor.config import RunConfig
from ddpdoctor.supervisor.capture import capture_pids, capture_ranks
from ddpdoctor.supervisor.events import EventLog, Say
from ddpdoctor.supervisor.live_state import LiveStateWriter, WatchFacts
from ddpdoctor.supervisor.os_wait import sample_idle
from ddpdoctor.supervisor.progress import ProgressTracker
from ddpdoctor.supervisor.watch import LiveJob
from ddpdoctor.trace import layout as L

JUDGE_AFTER_S = 1.0  # a rank blocked this long: build the job view and judge it
JUDGE_EVERY_S = 1.0
STEADY_WAIT_S = 0.1  # a rank inside one call longer than this: no steady look


@dataclass
class Verdict:
    """Why the supervisor stepped in: ``reason`` is hang | mismatch | abandoned | interrupt
    | node0; ``signum``, for an interrupt, the signal that ended the run (SIGPIPE: the
    output was closed)."""

    reason: str
    message: str
    signum: int = signal.SIGINT


class NodeLink(Protocol):
    """What a watch asks of the other nodes (supervisor/nodes.py; nothing with one node)."""

    def remote_stacks(self, ranks: list[int] | None) -> None:
        """The other nodes' stacks (of ``ranks``, or all), copied here."""
        ...

    def apply_progress(self, job: JobView) -> None:
        """The other nodes' ranks' progress, into a job view."""
        ...

    def skews(self) -> dict[str, int]:
        """Each other node's clock skew (host -> ns)."""
        ...


class AttemptWatch:
    """One attempt's watch: ``attempt`` is its number (0 without restarts), ``run_dir`` where
    its ranks write, ``nodes`` the other nodes of the job (None: one node)."""

    def __init__(self, config: RunConfig, run_dir: Path, attempt: int = 0,
                 started_ns: int = 0, say: Say = lambda text, style="": None,
                 nodes: NodeLink | None = None) -> None:
        self.config = config
        self.run_dir = run_dir
        self.attempt = attempt
        self.started_ns = started_ns
        self.say = say
        self.nodes = nodes
        self.live = LiveJob(run_dir)
        self.log = EventLog(run_dir, self.live.problems)
        self.live_state = LiveStateWriter(run_dir)  # RUN_DIR/live.json, for a live UI
        self.progress = ProgressTracker()
        self.os_waits: dict[int, tuple] = {}  # pid -> what its last os_wait event said
        self.mismatch_seen = False
        self.failure_seen_at: float | None = None  # monotonic: a rank died
        self._failing_seen_at: float | None = None  # a rank's trace said it failed
        self.judged_hung = False  # the causal model's hang rule has spoken (see judge)
        self.stragglers_said: set[tuple[int, ...]] = set()
        self._last_counts: tuple = ()
        self._uneven_said = False
        self._next_prediction = 0.0
        self._next_judge = 0.0
        self._stacks_early = False

    # -- each look ----------------------------------------------------------------------
    def steady(self) -> bool:
        """Every rank running, none inside a call for long, nothing seen amiss."""
        return self.failure_seen_at is None and not self.mismatch_seen and \
            self.live.steady(STEADY_WAIT_S)

    def sample_progress(self) -> None:
        self.progress.sample((p.rank, p.header.pid, p.header.count)
                             for p in self.live.local_ranks().values() if not p.gone)

    def check_processes(self) -> None:
        """Ranks that died or were stopped (read from /proc a few times a second): logged,
        and the first death captured."""
        for p in self.live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)
            if not p.exited_clean:
                self.say(f"rank {p.rank} (pid {p.header.pid}) died", "red")
                if self.failure_seen_at is None:
                    self.failure_seen_at = time.monotonic()
                    self.capture("failure")
        for p in self.live.stopped():
            if not p.stop_logged:
                p.stop_logged = True
                self.log("rank_stopped", pid=p.header.pid, rank=p.rank)

    def failing_since(self) -> float | None:
        """Since when (monotonic) a rank is known to have failed: its process died, or its
        trace says it failed while its process still ends (a teardown at exit); None while
        none has."""
        if self.failure_seen_at is not None:
            return self.failure_seen_at
        if self._failing_seen_at is None and any(
                p.header.state == L.RankState.FAILED for p in self.live.local_ranks().values()):
            self._failing_seen_at = time.monotonic()
        return self._failing_seen_at

    def check_traces(self) -> Verdict | None:
        """A first look at a mismatch (said at once), predictions, then the causal model's
        verdict: the one rule that stops the job."""
        live = self.live
        counts = tuple(p.read_upto for p in live.procs.values())
        changed, self._last_counts = counts != self._last_counts, counts
        div = live.divergence() if changed and not self.mismatch_seen else None
        if div is not None:
            self.mismatch_seen = True
            self.say(f"collectives diverge at seq {div.seq} (group {div.group}): "
                     + "; ".join(f"rank {r} {c.describe()} at {c.short_site}"
                                 for r, c in div.calls.items()), "yellow")
        self._predict()
        return self._judge()

    def publish(self) -> None:
        """RUN_DIR/live.json, when due."""
        if self.live_state.due():
            self.live_state.publish(self.live, self.facts())

    def facts(self) -> WatchFacts:
        """What this watch knows beyond the traces (see WatchFacts)."""
        idle = {}
        for pid, said in dict(self.os_waits).items():
            prog = self.progress.by_pid.get(pid)
            if prog is not None and not prog.cpu_busy:
                idle[pid] = said[1]
        return WatchFacts(tuple(self.config.command), self.started_ns,
                          float(self.config.hang_timeout), self.mismatch_seen,
                          len(self.stragglers_said), self.failure_seen_at is not None,
                          self.judged_hung, self.nodes.skews() if self.nodes else {}, idle)

    def look_at_end(self) -> None:
        """The last look at an attempt that ended: new records, the ranks' progress and
        which ranks are gone, into the log the report reads."""
        self.live.poll()
        if self.progress.by_pid:
            self.log("progress", ranks=self.progress.event())
        for p in self.live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)

    def capture(self, why: str) -> None:
        """The live local ranks' dumps, connections and stacks, and the other nodes' stacks."""
        ranks = {r: p for r, p in self.live.local_ranks().items() if not p.gone}
        capture_ranks(self.run_dir, ranks, why, self.log)
        self._remote_stacks(None)

    def close(self) -> None:
        self.log.close()

    # -- judging --------------------------------------------------------------------------
    def _needs_judging(self) -> bool:
        """Build the full job view only when the live view sees something to judge: a rank
        blocked (in a call or in the rendezvous) past a short threshold (or past the
        mismatch settle time once a divergence was seen, or at all once a rank exited), a
        rank that died a hang timeout ago, or ranks still starting after it."""
        longest = self.live.longest_wait()
        short = min(JUDGE_AFTER_S, self.config.hang_timeout / 2)
        if self.mismatch_seen or any(p.gone and p.exited_clean
                                     for p in self.live.ranks().values()):
            short = min(short, MISMATCH_SETTLE_S)
        if longest is not None and longest[2] >= short:
            return True
        if self.failure_seen_at is not None and \
                time.monotonic() - self.failure_seen_at > self.config.hang_timeout:
            return True
        ranks = self.live.ranks().values()
        age = (time.time_ns() - self.started_ns) / 1e9
        starting = not ranks or any(p.header.state == L.RankState.STARTING for p in ranks)
        return starting and age >= self.config.hang_timeout

    def _job_view(self) -> JobView:
        """The job as the causal model sees it now, with the live progress facts."""
        from ddpdoctor.analysis.load.run_dirs import load_job
        from ddpdoctor.proc.table import live_state
        from ddpdoctor.report.build import LIVE_TAIL

        job = load_job([self.run_dir], live=True, hang_timeout=self.config.hang_timeout,
                       tail=LIVE_TAIL, probe=live_state)
        self.progress.apply(job)
        if self.nodes is not None:
            self.nodes.apply_progress(job)
        return job

    def _judge(self) -> Verdict | None:
        """The causal model's hang rule, at most once a second while some rank is blocked."""
        now = time.monotonic()
        if now < self._next_judge or not self._needs_judging():
            return None
        self._next_judge = now + JUDGE_EVERY_S
        from ddpdoctor.analysis.causal.verdict import HangVerdict, Straggling, judge

        timeout = self.config.hang_timeout
        try:
            sample_idle(self.live, self.progress, self.log, self.os_waits)
            job = self._job_view()
            found = judge(job, timeout)
            if found is None and not self._stacks_early:
                found = judge(job, timeout / 2)  # halfway: where are they?
                if isinstance(found, HangVerdict):
                    self._capture_absent(found.absent)
                found = None
        except Exception as e:  # noqa: BLE001 - a model bug must not stop the supervision
            self.live.problems.append(f"hang check failed: {type(e).__name__}: {e}")
            return None
        if isinstance(found, Straggling):
            if found.ranks not in self.stragglers_said:
                self.stragglers_said.add(found.ranks)
                found = self._with_frames(found)
                # the verdict that may follow never contradicts it: a straggler that stops
                # making progress is a hang at the hang timeout, one still working at the bound
                self.say(found.message + " (a straggler so far: a hang if it stops making "
                         "progress, or if they still wait at the wait bound, "
                         f"{self.config.bound:g} s)", "yellow")
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

        live = self.live.local_ranks()
        capture_pids(self.run_dir, [live[r].header.pid for r in found.ranks if r in live],
                     "straggler", self.log)
        self._remote_stacks(list(found.ranks))
        try:
            again = judge(self._job_view(), self.config.hang_timeout)
        except Exception as e:  # noqa: BLE001 - the first notice is still worth saying
            self.live.problems.append(f"straggler check failed: {type(e).__name__}: {e}")
            return found
        return again if isinstance(again, Straggling) else found

    def _capture_absent(self, ranks: tuple[int, ...]) -> None:
        """Stacks of the ranks others wait on, taken before the verdict."""
        self._stacks_early = True
        live = self.live.local_ranks()
        capture_pids(self.run_dir, [live[r].header.pid for r in ranks
                                    if r in live and not live[r].gone], "absent", self.log)
        self._remote_stacks(list(ranks))

    def _remote_stacks(self, ranks: list[int] | None) -> None:
        if self.nodes is not None:
            self.nodes.remote_stacks(ranks)

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
