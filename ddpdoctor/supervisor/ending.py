"""Ending: how a supervised job (or one attempt of it) ends: the report built, finished
(report/finished.py) and written once per ending (a verdict's at once, then once the job is
over), the job stopped (or left to run), the summary printed.  Which outcome and which exit
status is report/outcome.py's policy."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from ddpdoctor.config import OnHang, RunConfig
from ddpdoctor.proc.control import JobTree, StopResult, stop_job
from ddpdoctor.proc.job_output import JobOutput
from ddpdoctor.proc.signals import reader_gone, say_to_stderr, signal_of
from ddpdoctor.report.build import build_report, fallback_report
from ddpdoctor.report.console import show_report
from ddpdoctor.report.finished import RunFacts, finish_report
from ddpdoctor.report.outcome import EXIT_HUNG, RunEnd, exit_status, recorded_outcome
from ddpdoctor.rundir.layout import write_json_atomic
from ddpdoctor.rundir.safe_path import PARENT_MODE, make_dirs
from ddpdoctor.supervisor.attempt_watch import AttemptWatch, Verdict
from ddpdoctor.supervisor.attempts import REPORT, Attempts
from ddpdoctor.supervisor.events import Voice
from ddpdoctor.supervisor.nodes import Nodes

POLL_SECONDS = 0.1
SELF_END_S = 5.0  # after a rank failed, the launcher's time to end the job by itself
SELF_END_LEFT_S = 2.0  # at least, once the verdict's stacks are taken (a launcher polls 1/s)
SELF_END_MAX_S = 30.0  # at most, while the job's processes keep ending


class StopRequest:
    """A request to end the run as interrupted, from a signal handler, the UI's thread or a
    closed output: the first asker's signal stands."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int = signal.SIGINT

    def ask(self, signum: int = signal.SIGINT) -> None:
        if not self.event.is_set():
            self.signum = signum
        self.event.set()

    @property
    def asked(self) -> bool:
        return self.event.is_set()


class Ending:
    """The endings of one supervised job.

    Args:
        report_path: where the job's report goes (a restarted job's top-level report; each
            attempt's own is RUN_DIR/attempt-K/report.json).
        attempts: the attempts of a job torchrun may restart, else None.
        job_output: the job's output, tee'd (into RUN_DIR/job.log alone once it is stopped).
    """

    def __init__(self, config: RunConfig, proc: subprocess.Popen, tree: JobTree,
                 voice: Voice, nodes: Nodes, stop: StopRequest, report_path: Path,
                 attempts: Attempts | None, started_ns: int,
                 job_output: JobOutput | None = None) -> None:
        self.config = config
        self.proc = proc
        self.tree = tree
        self.voice = voice
        self.nodes = nodes
        self.stop_request = stop
        self.report_path = report_path
        self.attempts = attempts
        self.started_ns = started_ns
        self.job_output = job_output
        self.stopped: dict[str, Any] | None = None  # what the last stop did
        self.report: dict[str, Any] | None = None  # the job's report, once written
        self.written: Path | None = None  # where it was written (None: it could not be)

    # -- the endings ----------------------------------------------------------------------
    def ended(self, watch: AttemptWatch, code: int) -> int:
        """The job exited by itself with ``code``: its outcome and status stand."""
        watch.look_at_end()
        if self.nodes.follow_end(watch, code):
            return code  # node 0 wrote the job's report
        self.nodes.wait_done()
        self._finish(watch, self._facts(watch, RunEnd.ENDED, code, code), live=False)
        return code

    def ends_by_itself(self, watch: AttemptWatch) -> bool:
        """Is the job ending on its own (it exited, or a rank failed and the launcher ends
        the rest)?  Then its own outcome and exit status stand, not a hang verdict."""
        watch.check_processes()
        if self.proc.poll() is not None:
            return True
        since = watch.failing_since()  # a rank died, or its trace says it failed
        if since is None:
            return False
        # the launcher's chance: SELF_END_S from the failure, longer while the job's
        # processes are still ending one by one (a launcher that polls, then stops the rest)
        # (the seconds ddpdoctor spent capturing the job's state counted as little as may be)
        deadline = max(since + SELF_END_S, time.monotonic() + SELF_END_LEFT_S)
        last = len(self.tree.snapshot())
        cap = since + max(SELF_END_MAX_S, self.config.hang_timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return True
            time.sleep(POLL_SECONDS)
            alive = len(self.tree.snapshot())
            if alive < last:
                deadline = min(max(deadline, time.monotonic() + SELF_END_S), cap)
            last = alive
        return self.proc.poll() is not None

    def judged(self, watch: AttemptWatch, verdict: Verdict) -> int:
        """A verdict (a hang, or an interruption): the report as the job stands, then the
        job stopped (or, under ``--on-hang wait``, left to run and waited for)."""
        interrupted = verdict.reason == "interrupt"
        end = RunEnd.INTERRUPTED if interrupted else RunEnd.HUNG
        watch.live.poll()
        # an interrupted job is judged as a live one (a wait shorter than the hang timeout
        # is no finding), then said to be interrupted
        built = self._build(watch, end, None, live=True)
        # the report as at the verdict, at once (the stop takes seconds; --on-hang wait
        # leaves the job running), then once more when the job is over
        at_verdict = finish_report(built, self._facts(watch, end, signum=verdict.signum,
                                                      over=False), watch.run_dir)
        self._save(self._path(watch), at_verdict, watch)
        stop = interrupted or self.config.on_hang == OnHang.STOP
        self.nodes.publish_verdict(verdict.reason, verdict.message, stop,
                                   exit_status(end, signum=verdict.signum))
        # --on-hang wait: the summary at the verdict (the job runs on); --json and --quiet
        # print once, the report as it ends
        at_once = not stop and self.voice.shown == "summary"
        if stop:
            code = self._stop(watch, verdict.reason, interrupted, verdict.signum)
            exit_code = exit_status(end, signum=verdict.signum)
        else:
            if at_once:
                self._summary(at_verdict, self._path(watch))
            code, exit_code = self._wait(watch)
        self._finish(watch, self._facts(watch, end, exit_code, code, verdict.signum),
                     built=built, summary=not at_once)
        return exit_code

    def _wait(self, watch: AttemptWatch) -> tuple[int | None, int]:
        """--on-hang wait: wait for the job (Ctrl-C stops it); (the job's status, the exit
        status: the job's own when it ended by itself, else the interruption's)."""
        self.voice.say("--on-hang wait: the job keeps running; ddpdoctor waits for it "
                       "(Ctrl-C stops it)")
        try:
            while self.proc.poll() is None and not self.stop_request.asked:
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt as e:
            self.stop_request.ask(signal_of(e))
        if self.proc.poll() is None:
            signum = self.stop_request.signum
            return (self._stop(watch, "interrupt", True, signum),
                    exit_status(RunEnd.INTERRUPTED, signum=signum))
        self.stop_leftovers(watch)
        return self.proc.returncode, exit_status(RunEnd.ENDED, self.proc.returncode)

    def followed(self, watch: AttemptWatch) -> int:
        """Node 0 found the job hung and wrote the report: stop this node's ranks too."""
        said = (self.nodes.node0_verdict() or {}).get("exit_code")
        exit_code = said if type(said) is int else EXIT_HUNG
        interrupted = exit_code > 128
        code = self._stop(watch, "node0", interrupted, exit_code - 128 if interrupted else 0)
        if not self.nodes.follow_end(watch, None):  # node 0 went quiet: this node's own report
            self._finish(watch, self._facts(watch, RunEnd.NODE0_SILENT, exit_code, code),
                         live=False)
        return exit_code

    def restarted(self, watch: AttemptWatch) -> dict[str, Any]:
        """torchrun started the next attempt: ``watch``'s attempt failed; its report."""
        watch.look_at_end()
        return self._finish(watch, self._facts(watch, RunEnd.RESTARTED), live=False)

    # -- the report -----------------------------------------------------------------------
    def _facts(self, watch: AttemptWatch, end: RunEnd, exit_code: int | None = None,
               job_exit_code: int | None = None, signum: int = 0,
               over: bool = True) -> RunFacts:
        listed = self.nodes.listed() if over and end is not RunEnd.RESTARTED else None
        return RunFacts(end, tuple(self.config.command), exit_code, job_exit_code, signum,
                        tuple(watch.live.problems) + (listed[1] if listed else ()),
                        self.stopped, listed[0] if listed else None,
                        watch.attempt if self.attempts is not None else None, over)

    def _build(self, watch: AttemptWatch, end: RunEnd, exit_code: int | None,
               live: bool) -> dict[str, Any]:
        """The report built from the attempt's run dir, the outcome recorded first (the
        analysis reads it back)."""
        self.nodes.check_membership(watch, final=True)
        outcome = recorded_outcome(end, exit_code)
        if outcome is not None:
            watch.log("outcome", outcome=outcome, exit_code=exit_code)
        try:
            return build_report(watch.run_dir, live=live,
                                hang_timeout=self.config.hang_timeout, full=True)
        except Exception as e:  # noqa: BLE001 - a report of what is known beats none
            return fallback_report(outcome or "failed", e, len(watch.live.ranks()),
                                   self.started_ns)

    def _finish(self, watch: AttemptWatch, facts: RunFacts, built: dict[str, Any] | None = None,
                live: bool = False, summary: bool = True) -> dict[str, Any]:
        """Finish the report of an ending (building it unless ``built``), write it once,
        and, for the job's last ending, tell the other nodes and print the summary."""
        logged = (recorded_outcome(facts.end, facts.exit_code), facts.exit_code)
        if built is None:
            built = self._build(watch, facts.end, facts.exit_code, live)
        else:
            logged = (recorded_outcome(facts.end), None)
        report = finish_report(built, facts, watch.run_dir)
        if (report["outcome"], report["exit_code"]) != logged:
            watch.log("outcome", outcome=report["outcome"], exit_code=report["exit_code"])
        path = self._path(watch)
        saved = self._save(path, report, watch)
        if self.attempts is not None:
            self.attempts.ended(watch.attempt, report)
        if facts.end is RunEnd.RESTARTED:
            return report  # the job goes on: its next attempt's ending writes the job's report
        job_report, job_saved = report, saved
        if self.attempts is not None:
            job_report = self.attempts.top(report)
            job_saved = self._save(self.report_path, job_report, watch)
        self.report, self.written = job_report, self.report_path if job_saved else None
        self.nodes.announce(self.written, report["outcome"])
        if summary:
            self._summary(report, path if saved else None)
        if self.attempts is not None and self.attempts.summary():
            self.voice.say(f"{self.attempts.summary()}; report: {self.report_path}")
        return report

    def _path(self, watch: AttemptWatch) -> Path:
        """Where the report of ``watch``'s ending goes: its attempt's own, else the job's."""
        return watch.run_dir / REPORT if self.attempts is not None else self.report_path

    def _save(self, path: Path, report: dict[str, Any], watch: AttemptWatch) -> bool:
        try:
            make_dirs(path.parent, PARENT_MODE)
            write_json_atomic(path, report)
        except OSError as e:
            say_to_stderr(f"ddpdoctor: cannot write the report to {path}: {e.strerror or e}")
            return False
        watch.log("report", path=str(path))
        return True

    def _summary(self, report: dict[str, Any], path: Path | None) -> None:
        if self.voice.quiet:
            return
        out = self.voice.out
        if self.voice.shown == "summary" and (out.quiet or reader_gone(out.file)):
            out = self.voice.console  # stdout's reader went (`| head`): stderr still reads
        try:
            show_report(report, path, out, self.voice.shown)
        except Exception as e:  # noqa: BLE001 - the report on disk is what matters
            say_to_stderr(f"ddpdoctor: could not print the summary ({e}); see {path}")

    # -- the stop -------------------------------------------------------------------------
    def _stop(self, watch: AttemptWatch, reason: str, interrupted: bool,
              signum: int = signal.SIGINT) -> int | None:
        """Stop the whole job; returns the job's status."""
        watch.log("stop", reason=reason)
        # Ctrl-C reaches the job as Ctrl-C; a hung job, or one whose run was ended by
        # SIGTERM, SIGHUP or a closed output, gets SIGTERM, its launcher frozen first (no
        # traceback over the verdict). Whatever still runs after a short grace (a rank
        # stuck in C++, the frozen launcher) is SIGKILLed: its stacks are saved by then.
        ctrl_c = interrupted and signum == signal.SIGINT
        # what the job prints as it is stopped (its launcher's and ranks' tracebacks) is
        # kept in job.log, not shown over the verdict and the summary
        if self.job_output is not None and not self.job_output.muted:
            self.job_output.mute()
            self.voice.say(f"stopping the job; its output from now on goes to "
                           f"{self.job_output.path.name} in the run dir")
        result = stop_job(self.proc, self.tree, watch.live.pids(),
                          first=signal.SIGINT if ctrl_c else signal.SIGTERM,
                          quiet_launcher=not ctrl_c)
        self._note_stop(watch, reason, result)
        return result.exit_code

    def stop_leftovers(self, watch: AttemptWatch) -> None:
        """The job has ended: stop what it left running (DataLoader workers, children of
        its ranks), found through the OS from the processes seen while it ran."""
        if not self.tree.snapshot():
            return
        self._note_stop(watch, "leftovers", stop_job(self.proc, self.tree))

    def _note_stop(self, watch: AttemptWatch, reason: str, result: StopResult) -> None:
        self.stopped = result.as_dict(reason)
        watch.log("stopped", **self.stopped)
        stubborn = [p for p in result.killed if p not in result.frozen]
        if stubborn:
            self.voice.say(f"SIGKILLed what did not stop after {result.signal}: pids "
                           f"{', '.join(map(str, stubborn))}")
