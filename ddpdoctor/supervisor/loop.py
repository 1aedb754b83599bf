"""Supervisor: watch the running job, catch hangs, failures and mismatches, write the report.

The supervisor is composed of parts it holds, each with its own state: the watch of the
attempt that runs (attempt_watch.AttemptWatch: a restart makes a fresh one), the other
nodes (nodes.Nodes), torchrun's attempts (attempts.Attempts, for a job that may restart)
and the endings (ending.Ending).  This module is the loop that drives them."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console

from ddpdoctor.config import RunConfig
from ddpdoctor.proc.control import JobTree, stop_whole_job
from ddpdoctor.proc.job_output import JobOutput
from ddpdoctor.proc.signals import ENDING_SIGNALS, OutputWatch, describe, say_to_stderr, \
    signal_of
from ddpdoctor.redact import redact_argv
from ddpdoctor.supervisor.attempt_watch import AttemptWatch, Verdict
from ddpdoctor.supervisor.attempts import REPORT, Attempts
from ddpdoctor.supervisor.ending import POLL_SECONDS, Ending, StopRequest
from ddpdoctor.supervisor.events import Voice
from ddpdoctor.supervisor.nodes import Nodes

# While every rank of a one-node job runs and none waits, the loop looks 4 times a second
# instead of 10: on a machine whose cores the ranks fill, each look takes a core from a rank
# and, in a job whose ranks step together, delays every rank (bench/README.md).
STEADY_POLL_SECONDS = 0.25
PROCESS_CHECK_S = 0.25  # between /proc checks of the ranks' liveness (and of the membership)
PROGRESS_S = 0.5  # between samples of the ranks' CPU time
TREE_CHECK_S = 2.0  # between two looks at the job's process tree (the stop looks again)
TREE_SHARE = 0.005  # at most this share of the time goes to those looks (they read all of
# /proc: a busy node's thousands of processes cost tens of milliseconds a look)


class Supervisor:
    """Runs beside the job (the job is ``proc``, its own process group).

    Args:
        console: where notices go (stderr); out: where the summary goes (stdout; default
            ``console``).  job_output: the job's output, tee'd into RUN_DIR/job.log.
        max_restarts: torchrun's ``--max-restarts`` of the job: above 0, each attempt gets
            RUN_DIR/attempt-K/ and its own report, and the job's report lists them.
    """

    def __init__(self, config: RunConfig, run_dir: Path, proc: subprocess.Popen,
                 report_path: Path, console: Console, started_ns: int,
                 max_restarts: int = 0, out: Console | None = None,
                 job_output: JobOutput | None = None):
        self.config = config
        self.base_dir = run_dir
        self.proc = proc
        self.started_ns = started_ns
        # the UI shows everything while it runs; the summary goes to ``out`` (stdout)
        self.voice = Voice(console, quiet=config.ui, out=out, shown=config.shown.value)
        self.stop = StopRequest()
        self.output = OutputWatch()  # ddpdoctor's stdout and stderr, closed by their reader?
        self.tree = JobTree((proc.pid,))
        self.attempts = Attempts(run_dir, max_restarts) if max_restarts > 0 else None
        self.nodes = Nodes(config, self.voice.say, lambda: self.watch,
                           self.attempts.run_dir_of if self.attempts else lambda _: run_dir)
        self.ending = Ending(config, proc, self.tree, self.voice, self.nodes, self.stop,
                             report_path, self.attempts, started_ns, job_output)
        self.watch = self._watch_of(0)
        self._due = {"tree": 0.0, "progress": 0.0, "processes": 0.0}  # monotonic times

    def _watch_of(self, attempt: int) -> AttemptWatch:
        """A fresh watch over attempt ``attempt`` (its own dir when the job may restart)."""
        run_dir = self.attempts.enter(attempt) if self.attempts is not None else self.base_dir
        return AttemptWatch(self.config, run_dir, attempt, self.started_ns, self.voice.say,
                            self.nodes)

    @property
    def report(self) -> dict[str, Any] | None:
        """The job's report once written (a restarted job's: with every attempt)."""
        return self.ending.report

    @property
    def report_path(self) -> Path | None:
        """Where the job's report was written (None: it could not be)."""
        return self.ending.written

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Ask the loop to end the run as interrupted by ``signum`` (the first asker's
        signal stands); safe from a signal handler or another thread."""
        self.stop.ask(signum)

    # -- the loop --------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until the job ends (or is stopped); returns ddpdoctor's exit status."""
        try:
            self.watch.log("start", pid=self.proc.pid,
                           command=redact_argv(self.config.command))
            try:
                verdict = self._watch_job()
            except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP (proc.signals.Interrupted)
                verdict = Verdict("interrupt", describe(signal_of(e)), signal_of(e))
            with self._finishing():
                return self._end(verdict)
        except BaseException:  # a bug of ddpdoctor's leaves no process of the job behind,
            # at once (under the UI the main thread learns of it only when the UI quits)
            stop_whole_job(self.proc, self.tree)
            raise

    def _end(self, verdict: Verdict | None) -> int:
        """The ending a verdict (or the job's own end) calls for."""
        if verdict is not None:
            self.watch.log("verdict", reason=verdict.reason, message=verdict.message)
            if verdict.reason == "node0":
                self.voice.say(verdict.message, "bold magenta")
                return self.ending.followed(self.watch)
            if verdict.reason == "interrupt":
                self.voice.say(verdict.message)
            self.watch.capture(verdict.reason)
            if verdict.reason != "interrupt" and self.ending.ends_by_itself(self.watch):
                self.watch.log("ended_by_itself", reason=verdict.reason)
                verdict = None
        if verdict is not None:
            if verdict.reason != "interrupt":  # said once it stands: the job did not end
                self.voice.say(verdict.message, "bold magenta")
            return self.ending.judged(self.watch, verdict)
        code = self.proc.wait()
        self.ending.stop_leftovers(self.watch)
        self._catch_up()
        return self.ending.ended(self.watch, code)

    @contextmanager
    def _finishing(self) -> Iterator[None]:
        """While the report is written and the job stopped, a further Ctrl-C (or SIGTERM)
        does not cut that short: it only asks to stop a job ddpdoctor waits for."""
        if threading.current_thread() is not threading.main_thread():
            yield  # the UI's thread owns the signals; it asks for the stop
            return

        def again(signum: int, frame: Any) -> None:
            if not self.stop.asked:
                say_to_stderr("ddpdoctor: stopping the job and writing the report, one "
                              "moment")
            self.stop.ask(signum)

        previous = {sig: signal.signal(sig, again) for sig in ENDING_SIGNALS
                    if signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _watch_job(self) -> Verdict | None:
        while True:
            if self.stop.asked:
                return Verdict("interrupt", "stopped on request", self.stop.signum)
            gone = self.output.ending_signal()  # `| head` exited, the `tee` was killed
            if gone is not None:
                return Verdict("interrupt", describe(gone), gone)
            if self.proc.poll() is not None:
                return None
            self.watch.live.poll()
            verdict = self._check()
            if verdict is not None:
                return verdict
            self.watch.publish()
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
        return not self.nodes.many and not self.stop.asked and self.watch.steady()

    def _check(self) -> Verdict | None:
        """One look: the attempts, the process tree, progress, processes, the nodes, then
        the traces."""
        if self.attempts is not None and self.attempts.next_started(self.watch.attempt):
            self._next_attempt()
            return None
        verdict = self._look()
        if verdict is not None and verdict.reason != "interrupt" and \
                self.attempts is not None and \
                self.attempts.restart_expected(self.watch.attempt, self.watch.failure_seen_at,
                                               self.config.hang_timeout):
            return None  # torchrun stops this attempt's ranks and starts the next one
        return verdict

    def _look(self) -> Verdict | None:
        watch = self.watch
        if self._is_due("tree", TREE_CHECK_S):
            began = time.monotonic()
            self.tree.snapshot()  # every process of the job, remembered for the stop
            took = time.monotonic() - began
            self._due["tree"] = max(self._due["tree"], began + took / TREE_SHARE)
        if self._is_due("progress", PROGRESS_S):
            watch.sample_progress()
        if self._is_due("processes", PROCESS_CHECK_S):
            self.nodes.check_membership(watch)
            watch.check_processes()
        self.nodes.check_leader()
        if self.nodes.follower is not None:
            self.nodes.serve(watch)
            if self.nodes.following:
                said = self.nodes.node0_verdict()
                return Verdict("node0", f"node 0: {said.get('message', 'the job is stopped')}") \
                    if said is not None else None
        return watch.check_traces()

    def _next_attempt(self) -> None:
        """The agent started attempt K+1: report attempt K as failed, then follow K+1 with
        a fresh watch."""
        assert self.attempts is not None
        old = self.watch
        report = self.ending.restarted(old)
        self.voice.say(f"attempt {old.attempt} {report.get('outcome')}: {_why(report)}; "
                       f"report {old.run_dir / REPORT}; torchrun restarts the job "
                       f"(attempt {old.attempt + 1}, at most {self.attempts.max_restarts} "
                       "restarts)", "yellow")
        old.close()
        self.watch = self._watch_of(old.attempt + 1)
        self.watch.log("start", pid=self.proc.pid, command=redact_argv(self.config.command),
                       attempt=self.watch.attempt)

    def _catch_up(self) -> None:
        """The job ended: every attempt torchrun started since the last look (one may have
        begun and ended between two looks, e.g. while a failure was captured) is followed
        in turn, so that the job's report is its last attempt's and lists them all."""
        while self.attempts is not None and self.attempts.next_started(self.watch.attempt):
            self._next_attempt()


def _why(report: dict[str, Any]) -> str:
    """The first root cause of an attempt's report, in one line."""
    for f in report.get("findings", []):
        if f.get("severity") == "error" and f.get("caused_by") is None:
            return str(f.get("summary", f.get("kind", "")))
    return "no root cause named"
