"""How a supervised job ends: stacks and dumps captured, the report written, the job
stopped (or left to run), the summary printed."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpdoctor.config import OnHang
from ddpdoctor.proc.control import StopResult, stop_job
from ddpdoctor.proc.signals import OUTPUT_CLOSED, exit_status, say_to_stderr, signal_of
from ddpdoctor.rundir.layout import free_bytes, write_json_atomic
from ddpdoctor.report.build import build_report
from ddpdoctor.report.console import NEVER_INITIALIZED, NO_ACTIVITY, print_summary
from ddpdoctor.redact import redact_argv
from ddpdoctor.supervisor.connections import capture_connections
from ddpdoctor.supervisor.flight_recorder import request_dumps, wait_for_dumps
from ddpdoctor.supervisor.stacks import capture_stacks
from ddpdoctor.rundir.safe_path import PARENT_MODE, make_dirs

EXIT_HUNG = 124
POLL_SECONDS = 0.1
SELF_END_S = 5.0  # after a rank failed, the launcher's time to end the job by itself


@dataclass
class Verdict:
    """Why the supervisor stepped in: ``reason`` is hang | mismatch | abandoned | interrupt;
    ``signum``, for an interrupt, the signal that ended the run (SIGPIPE: the output was
    closed)."""

    reason: str
    message: str
    signum: int = signal.SIGINT


class JobEnding:
    """The Supervisor's endings (a mixin: it uses the Supervisor's config, run dir, job,
    live view, log, console and membership check)."""

    def _capture(self, why: str) -> None:
        ranks = {r: p for r, p in self.live.local_ranks().items() if not p.gone}
        live_pids = [p.header.pid for p in ranks.values()]
        # only a rank that has run a collective has a process group, so a dump to wait for
        live = [r for r, p in ranks.items() if p.hi or p.groups]
        t0 = time.monotonic()
        asked = request_dumps(self.run_dir)  # ranks dump while py-spy samples them
        self._capture_connections(live_pids)
        capture_stacks(live_pids, self.run_dir / "stacks")
        self.log("stacks", why=why, pids=live_pids, seconds=round(time.monotonic() - t0, 3))
        missing = wait_for_dumps(self.run_dir, live, asked)
        self.log("flight_recorder", ranks=sorted(set(live) - set(missing)), missing=missing,
                 seconds=round(time.monotonic() - t0, 3))
        self.remote_stacks(None)  # node 0 of many: the other nodes' stacks too

    def _capture_connections(self, pids: list[int]) -> None:
        """The ranks' TCP connections, first: the kernel's idle times as at the verdict."""
        try:
            found = capture_connections(pids, self.run_dir / "stacks")
        except Exception as e:  # noqa: BLE001 - the report goes on without them
            self.log("sockets", error=f"{type(e).__name__}: {e}")
            return
        self.log("sockets", pids=pids, sockets=sum(len(c.sockets) for c in found.values()),
                 errors={str(p): c.error for p, c in found.items() if c.error})

    def _write(self, outcome: str | None, exit_code: int | None, live: bool) -> dict[str, Any]:
        self._check_membership(final=True)
        if outcome is not None:
            self.log("outcome", outcome=outcome, exit_code=exit_code)
        try:
            report = build_report(self.run_dir, live=live,
                                  hang_timeout=self.config.hang_timeout, full=True)
        except Exception as e:  # noqa: BLE001 - a report of what is known beats none
            report = self._fallback_report(outcome or "failed", exit_code, e)
        report["command"] = redact_argv(self.config.command)
        report["exit_code"] = exit_code
        report["problems"] = list(dict.fromkeys(report.get("problems", []) +
                                                self.live.problems))
        if not report["ranks"]:
            report.setdefault("notes", []).append(no_activity_note(self.run_dir))
        try:
            make_dirs(self.report_path.parent, PARENT_MODE)
            write_json_atomic(self.report_path, report)
            self.log("report", path=str(self.report_path))
        except OSError as e:
            say_to_stderr(f"ddpdoctor: cannot write the report to {self.report_path}: "
                          f"{e.strerror or e}")
            self.report_path = None  # type: ignore[assignment]
        self.report = report
        return report

    def _fallback_report(self, outcome: str, exit_code: int | None,
                         error: BaseException) -> dict[str, Any]:
        from ddpdoctor.report.schema import SCHEMA, iso

        return {"schema": SCHEMA, "outcome": outcome, "command": redact_argv(self.config.command),
                "world_size": len(self.live.ranks()), "started_at": iso(self.started_ns),
                "ended_at": iso(time.time_ns()), "ranks": [], "findings": [],
                "problems": [f"analysis failed: {type(error).__name__}: {error}"]}

    def _finish_ended(self) -> int:
        code = self.proc.wait()
        self._stop_leftovers()
        self.live.poll()
        if self.progress.by_pid:
            self.log("progress", ranks=self.progress.event())
        for p in self.live.check_processes():
            self.log("rank_gone", pid=p.header.pid, rank=p.rank, clean=p.exited_clean)
        if self.follow_end(code):
            return code  # node 0 wrote the job's report
        self.wait_nodes_done()
        outcome = "completed" if code == 0 else "failed"
        report = self._write(outcome, code, live=False)
        changed = self._add_stop(report)
        if self.leader is not None:
            self.end_nodes(report)
            changed = True
        if code == 0 and any(f.get("severity") == "error" for f in report["findings"]):
            report["outcome"] = "failed"
            self.log("outcome", outcome="failed", exit_code=code)
            changed = True
        if changed and self.report_path is not None:
            write_json_atomic(self.report_path, report)
        self._summary(report)
        return code

    def _ends_by_itself(self) -> bool:
        """Is the job ending on its own (it exited, or a rank failed and the launcher ends
        the rest)?  Then its own outcome and exit status stand, not a hang verdict."""
        self._check_processes()
        if self.proc.poll() is not None:
            return True
        if self._failure_seen_at is None:
            return False
        deadline = self._failure_seen_at + SELF_END_S  # the launcher had its chance then
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return True
            time.sleep(POLL_SECONDS)
        return False

    def _finish_verdict(self, verdict: Verdict) -> int:
        self.say(verdict.message, "bold magenta" if verdict.reason != "interrupt" else "")
        self.log("verdict", reason=verdict.reason, message=verdict.message)
        if verdict.reason == "node0":
            return self._follow_verdict()
        self._capture(verdict.reason)
        interrupted = verdict.reason == "interrupt"
        if not interrupted and self._ends_by_itself():
            self.log("ended_by_itself", reason=verdict.reason)
            return self._finish_ended()
        self.live.poll()
        # an interrupted job is judged as a live one (a wait shorter than the hang timeout
        # is no finding), then said to be interrupted
        outcome = None if interrupted else "hung"
        report = self._write(outcome, None, live=True)
        if interrupted:
            _mark_interrupted(report, verdict.signum)
        stop = interrupted or self.config.on_hang == OnHang.STOP
        self.publish_verdict(verdict.reason, verdict.message, stop,
                             exit_status(verdict.signum) if interrupted else EXIT_HUNG)
        summarized = not stop
        if stop:
            code, exit_code = self._stop(verdict.reason, interrupted, verdict.signum)
        else:
            self._summary(report)
            self.say("--on-hang wait: the job keeps running; ddpdoctor waits for it "
                     "(Ctrl-C stops it)")
            try:
                while self.proc.poll() is None and not self.stop_requested.is_set():
                    time.sleep(POLL_SECONDS)
            except KeyboardInterrupt as e:
                self.request_stop(signal_of(e))
            if self.proc.poll() is None:
                code, exit_code = self._stop("interrupt", True, self.stop_signal)
            else:
                code = exit_code = self.proc.returncode
                self._stop_leftovers()
        report["exit_code"] = exit_code
        report["job_exit_code"] = code
        report["live"] = False  # the job is over: stopped, or ended while ddpdoctor waited
        self._add_stop(report)
        self.end_nodes(report)
        if self.report_path is not None:
            write_json_atomic(self.report_path, report)
        self.log("outcome", outcome=report["outcome"], exit_code=exit_code)
        if not summarized:
            self._summary(report)
        return exit_code

    def _follow_verdict(self) -> int:
        """Node 0 found the job hung and wrote the report: stop this node's ranks too."""
        assert self.follower is not None and self.follower.verdict is not None
        exit_code = self.follower.verdict.get("exit_code")
        exit_code = exit_code if type(exit_code) is int else EXIT_HUNG
        interrupted = exit_code > 128
        code, _ = self._stop("node0", interrupted, exit_code - 128 if interrupted else 0)
        if not self.follow_end(None):  # node 0 went quiet: this node's own report
            report = self._write("hung", exit_code, live=False)
            report["job_exit_code"] = code
            self._add_stop(report)
            if self.report_path is not None:
                write_json_atomic(self.report_path, report)
            self._summary(report)
        return exit_code

    def _stop(self, reason: str, interrupted: bool,
              signum: int = signal.SIGINT) -> tuple[int | None, int]:
        """Stop the whole job; returns (the job's status, ddpdoctor's exit status):
        124 for a hang, 128 + ``signum`` for an interruption."""
        self.log("stop", reason=reason)
        # Ctrl-C reaches the job as Ctrl-C; a hung job, or one whose run was ended by
        # SIGTERM, SIGHUP or a closed output, gets SIGTERM, its launcher frozen first (no
        # traceback over the verdict). Whatever still runs after a short grace (a rank
        # stuck in C++, the frozen launcher) is SIGKILLed: its stacks and the report are
        # saved by then.
        ctrl_c = interrupted and signum == signal.SIGINT
        result = stop_job(self.proc, self.tree, self.live.pids(),
                          first=signal.SIGINT if ctrl_c else signal.SIGTERM,
                          quiet_launcher=not ctrl_c)
        self._note_stop(reason, result)
        return result.exit_code, exit_status(signum) if interrupted else EXIT_HUNG

    def _stop_leftovers(self) -> None:
        """The job has ended: stop what it left running (DataLoader workers, children of
        its ranks), found through the OS from the processes seen while it ran."""
        if not self.tree.snapshot():
            return
        self._note_stop("leftovers", stop_job(self.proc, self.tree))

    def _note_stop(self, reason: str, result: StopResult) -> None:
        self.stopped = result.as_dict(reason)
        self.log("stopped", **self.stopped)
        stubborn = [p for p in result.killed if p not in result.frozen]
        if stubborn:
            self.say(f"SIGKILLed what did not stop after {result.signal}: pids "
                     f"{', '.join(map(str, stubborn))}")

    def _add_stop(self, report: dict[str, Any]) -> bool:
        """Put what the stop did into the report; True when the report changed."""
        if self.stopped is None:
            return False
        report["stopped"] = self.stopped
        return True

    def _summary(self, report: dict[str, Any]) -> None:
        if self.quiet:
            return
        try:
            print_summary(report, self.report_path, self.console)
        except Exception as e:  # noqa: BLE001 - the report on disk is what matters
            say_to_stderr(f"ddpdoctor: could not print the summary ({e}); see "
                          f"{self.report_path}")


def _mark_interrupted(report: dict[str, Any], signum: int) -> None:
    """An interrupted run's report: outcome interrupted, what ended it, and a note."""
    report["outcome"] = "interrupted"
    report["interrupted_by"] = signal.Signals(signum).name
    note = ("interrupted by the user" if signum == signal.SIGINT else
            "interrupted: the output was closed" if signum == OUTPUT_CLOSED else
            f"interrupted by {signal.Signals(signum).name}")
    report["notes"] = report.get("notes", []) + [note]


FULL_BELOW_BYTES = 1 << 20  # a rank's trace needs more than this


def no_activity_note(run_dir: Path) -> str:
    """Why the report has no rank: the job never started torch.distributed, or its ranks
    could not write their traces (the run dir's file system is full)."""
    free = free_bytes(run_dir)
    if free is not None and free < FULL_BELOW_BYTES:
        return (f"{NO_ACTIVITY}: the file system of {run_dir} is full ({free // 1024} KiB "
                "free), so the ranks could not record and ran without diagnosis; free space "
                "there or pass --run-dir")
    return NEVER_INITIALIZED
