"""`ddpdoctor run`: make the run dir, start the instrumented job, supervise it."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

import ddpdoctor
from ddpdoctor.config import RunConfig, Shown
from ddpdoctor.errors import UserError
from ddpdoctor.launch.command import job_argv, job_env
from ddpdoctor.launch.torch_range import torch_notice
from ddpdoctor.lint.prerun import lint_before_run
from ddpdoctor.launch.own_error import ended_by_own_error, keep_traceback
from ddpdoctor.proc.control import become_subreaper, start_job, stop_whole_job
from ddpdoctor.proc.job_output import JobOutput
from ddpdoctor.proc.signals import interrupts_raised, say_to_stderr, signal_of
from ddpdoctor.rundir.attempts import max_restarts
from ddpdoctor.rundir.command import prune_before_run
from ddpdoctor.rundir.layout import make_run_dir, new_run_id, write_json_atomic
from ddpdoctor.rundir.runs import hold_live
from ddpdoctor.redact import redact_argv
from ddpdoctor.report.console import ClosableConsole, summary_console
from ddpdoctor.report.outcome import status_under_fail_on
from ddpdoctor.report.schema import iso
from ddpdoctor.supervisor.loop import Supervisor
from ddpdoctor.supervisor.node_secret import node_secret
from ddpdoctor.supervisor.node_store import claim_channel, node_setup
from ddpdoctor.terminal_text import say
from ddpdoctor.rundir.safe_path import CheckedDir, UnsafePath, open_append


def _check_report_path(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"--report {path} is a directory; give a file path")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"cannot write the report to {path}: its folder does not exist or "
                        "is not writable")
    try:  # every directory on the way checked now, not when the job has ended
        CheckedDir(parent).close()
    except UnsafePath as e:
        raise UserError(f"cannot write the report to {path}: {e.strerror}; give another "
                        "--report") from None


def run_job(config: RunConfig, console: Console | None = None) -> int:
    """Run the job under supervision and return ddpdoctor's exit status.  Ctrl-C, SIGTERM,
    SIGHUP and a closed output each end it as interrupted: the job stopped, the report
    written, exit 128 + the signal (proc.signals)."""
    if config.ui and not _on_terminal():
        say("ddpdoctor: --ui needs a terminal (stdin and stdout are not both one); "
            "supervising with the console summary instead")
        config = dataclasses.replace(config, ui=False)
    console = console or ClosableConsole(stderr=True, soft_wrap=True,  # a notice is one line
                                    quiet=config.shown is Shown.QUIET)
    argv = job_argv(config)  # validates the command before anything is created
    nodes = node_setup(argv, config.doctor_store)
    secret = node_secret(config.node_secret_file, config.insecure_node_channel) \
        if nodes is not None else None  # many nodes: a secret, or no start
    if secret is not None:  # node 0's port, taken before the job: a squatted one stops here
        nodes = claim_channel(nodes, secret.value)
    run_id = new_run_id()
    run_dir = make_run_dir(config.run_dir, run_id)
    live = hold_live(run_dir)  # `ddpdoctor runs prune` leaves it alone while the run runs
    try:
        return _run_in(config, console, argv, nodes, secret, run_id, run_dir)
    finally:
        if live is not None:
            os.close(live)


def _run_in(config: RunConfig, console: Console, argv: list[str], nodes: Any,
            secret: Any, run_id: str, run_dir: Path) -> int:
    """run_job in its run dir, held live."""
    out = summary_console()  # the verdict, the table, the findings: stdout
    report_path = (config.report or run_dir / "report.json").absolute()
    _check_report_path(report_path)
    started = time.time_ns()
    write_json_atomic(run_dir / "run.json", {
        "run_id": run_id, "command": redact_argv(config.command), "argv": redact_argv(argv),
        "hang_timeout": config.hang_timeout, "wait_bound": config.bound,
        "on_hang": config.on_hang.value,
        "ddp": config.ddp.value, "started_at": iso(started), "cwd": os.getcwd(),
        "report": str(report_path), "ddpdoctor_version": ddpdoctor.__version__,
        "named_run_dir": config.run_dir is not None,
    })
    pruned = prune_before_run(config.keep) if config.run_dir is None else None
    if pruned:
        console.print(f"[bold]ddpdoctor:[/bold] {escape(pruned)}", highlight=False,
                      soft_wrap=True)  # one line: its paths never split
    if not config.ui:
        console.print(f"[bold]ddpdoctor:[/bold] run dir {run_dir}", highlight=False)
        said = torch_notice()  # once, before the job: it runs on whatever torch it has
        if said:
            console.print(f"[bold]ddpdoctor:[/bold] {escape(said)}", style="yellow",
                          highlight=False)
    lint_before_run(list(config.command), run_dir, console)  # notices; the job starts anyway
    # the job's output where it went, and in job.log (under the UI: in job.log alone)
    job_log = run_dir / "job.log"
    job_output = JobOutput(os.fdopen(open_append(job_log), "ab", buffering=0), job_log,
                           console=not config.ui)
    env = job_env(run_dir, run_id, config, argv)
    if job_output.piped_terminal:  # no pseudo-terminal: a pipe, as timely as a terminal
        env.setdefault("PYTHONUNBUFFERED", "1")
    proc = supervisor = None
    try:
        with interrupts_raised():
            become_subreaper()  # orphans of the job come back here, not to init
            try:
                proc = start_job(argv, env, streams=(job_output.stdout, job_output.stderr))
            finally:
                job_output.started()
            supervisor = Supervisor(config, run_dir, proc, report_path, console, started,
                                    max_restarts=max_restarts(argv), out=out,
                                    job_output=job_output)
            supervisor.nodes.open(nodes, secret)  # none for a one-node job
            status = _run_with_ui(supervisor, run_dir) if config.ui else supervisor.run()
            return _judged(status, supervisor, config)
    except BaseException as e:  # no process of the job outlives ddpdoctor, whatever ended it
        stop_whole_job(proc, supervisor.tree if supervisor is not None else None)
        if proc is None or not isinstance(e, Exception) or isinstance(e, UserError):
            raise  # before the job: as it is; Ctrl-C and signals: cli's exit status
        return ended_by_own_error(e, config, run_dir, report_path, started,
                                  supervisor is not None and supervisor.report is not None)
    finally:
        become_subreaper(False)
        job_output.close()


def _on_terminal() -> bool:
    """Can the UI run here: are stdin and stdout a terminal?"""
    try:
        return os.isatty(0) and os.isatty(1)
    except (OSError, ValueError):
        return False


def _judged(status: int, supervisor: Supervisor, config: RunConfig) -> int:
    """The exit status under --fail-on (said on stderr when it is not the job's own)."""
    status, why = status_under_fail_on(status, supervisor.report, config.fail_on)
    if why:
        say_to_stderr(f"ddpdoctor: {why}")
    return status


def _run_with_ui(supervisor: Supervisor, run_dir: Path) -> int:
    """The UI in the main thread, the supervisor beside it."""
    result: list[int] = []
    failed: list[Exception] = []

    def supervise() -> None:
        try:
            result.append(supervisor.run())
        except Exception as e:  # noqa: BLE001 - raised again in the main thread, below
            failed.append(e)

    thread = threading.Thread(target=supervise, name="ddpdoctor-supervisor", daemon=True)
    thread.start()
    try:
        from ddpdoctor.tui.app import run_live

        run_live(run_dir, run_dir / "job.log", thread.is_alive)
    except KeyboardInterrupt as e:  # SIGTERM or SIGHUP while the UI ran: the same ending
        supervisor.request_stop(signal_of(e))
    except ImportError as e:
        say(f"ddpdoctor: the UI is not available ({e}); supervising without it")
    except Exception as e:  # noqa: BLE001 - a bug of the UI: the supervision goes on
        kept = keep_traceback(e, run_dir)
        say_to_stderr(f"ddpdoctor: internal error in the UI ({type(e).__name__}: {e}"
                      f"{f'; traceback in {kept}' if kept else ''}); supervising without it")
    finally:
        supervisor.voice.quiet = False
    if thread.is_alive():
        say_to_stderr("ddpdoctor: UI closed; still supervising the job (Ctrl-C stops it)")
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt as e:
        supervisor.request_stop(signal_of(e))
        thread.join()
    if failed:
        raise failed[0]  # ddpdoctor's own error: the job is stopped (Supervisor.run)
    if supervisor.report is not None and supervisor.report_path is not None:
        say_to_stderr(f"ddpdoctor: {supervisor.report.get('outcome')}; report: "
                      f"{supervisor.report_path}")
    return result[0] if result else 1
