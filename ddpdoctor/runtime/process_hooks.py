"""Record how a process ends: exceptions, fatal signals, clean exit, and its children's exits."""

from __future__ import annotations

import atexit
import faulthandler
import os
import sys
import threading
import traceback
from typing import Any

from ddpdoctor.runtime import gloo_teardown
from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L
from ddpdoctor.rundir.safe_path import open_new

_fault_file: Any = None


def _frames(tb: Any) -> list[dict[str, Any]]:
    return [{"filename": f.filename, "line": f.lineno, "name": f.name}
            for f in traceback.extract_tb(tb)][-30:]


def record_exception(exc_type: type, exc: BaseException, tb: Any, thread: str) -> None:
    """Note an uncaught exception (creating the trace if this process has none yet)."""
    if issubclass(exc_type, (SystemExit, KeyboardInterrupt)) and thread == "main":
        return
    rec = R.existing() or (R.active() if os.environ.get("RANK") else None)
    if rec is None:
        return
    try:
        if rec.rank < 0 and os.environ.get("RANK", "").isdigit():
            rec.set_identity(int(os.environ["RANK"]), int(os.environ.get("WORLD_SIZE", -1)),
                             int(os.environ.get("LOCAL_RANK", -1)))
        if thread == "main" and rec.flow is not None:
            rec.flow.flush_open()  # the path that led to the exception
        rec.meta("exception", type=exc_type.__name__, message=str(exc)[:2000],
                 traceback=_frames(tb), thread=thread)
        if thread == "main":
            rec.writer.set_state(L.RankState.FAILED)
    except Exception as e:  # noqa: BLE001 - the user's own excepthook must still run
        rec.fail("excepthook", e)


def _install_excepthooks() -> None:
    previous = sys.excepthook

    def excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
        record_exception(exc_type, exc, tb, "main")
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    previous_thread = threading.excepthook

    def thread_excepthook(args: Any) -> None:
        name = getattr(args.thread, "name", "thread")
        record_exception(args.exc_type, args.exc_value, args.exc_traceback, name)
        previous_thread(args)

    threading.excepthook = thread_excepthook


def _at_exit() -> None:
    try:
        _say_exited()
        gloo_teardown.settle()
    except KeyboardInterrupt:
        pass  # a second Ctrl-C while the rank exits: it ends anyway, without our traceback
    except Exception:  # noqa: BLE001, S110 - exiting must not be disturbed
        pass


def _say_exited() -> None:
    """Mark the header EXITED (unless FAILED) and flush the trace as the process ends."""
    rec = R.existing()
    if rec is None:
        return
    if not rec.enabled:
        _mark_exit_disabled(rec)
        return
    try:
        flow = rec.flow
        if flow is not None:
            flow.flush_open()  # the path from the last collective to the end
            flow.stop()
        state = rec.writer  # header state FAILED stays FAILED
        from ddpdoctor.trace.reader import read_header

        header = read_header(state._map, rec.writer.ring_path)
        if header.state != L.RankState.FAILED:
            state.set_state(L.RankState.EXITED)
        rec.meta("exit")
        state._map.flush()
    except Exception as e:  # noqa: BLE001 - exiting must not be disturbed
        rec.fail("atexit", e)


def _mark_exit_disabled(rec: R.Recorder) -> None:
    """Recording stopped after an internal error: still say that the process ended
    normally, or the analysis would take the silent header for a killed rank."""
    try:
        from ddpdoctor.trace.reader import TraceError, read_header
    except ImportError:
        return
    try:
        if read_header(rec.writer._map, rec.writer.ring_path).state != L.RankState.FAILED:
            rec.writer.set_state(L.RankState.EXITED)
        rec.writer.meta("exit")
    except (OSError, ValueError, TraceError):
        pass  # the trace itself is broken: nothing more to save


def enable_faulthandler(rec: R.Recorder) -> None:
    """Dump every thread's Python stack to the run dir on SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE,
    unless the user enabled faulthandler already."""
    global _fault_file
    if faulthandler.is_enabled() or _fault_file is not None:
        return
    path = rec.writer.ring_path.with_name(f"pid-{os.getpid()}.fault.txt")
    _fault_file = os.fdopen(open_new(path), "w")  # in a checked dir, never through a link
    faulthandler.enable(file=_fault_file, all_threads=True)


def record_child_exit(pid: int, returncode: int | None) -> None:
    """Note a child's exit status in this launcher's trace (a signal as its negative)."""
    if returncode is None:
        return
    rec = R.existing()
    if rec is None and returncode != 0:
        rec = R.active()
    if rec is not None:
        rec.meta("child_exit", pid=pid, returncode=returncode)


def _patch_child_exits() -> None:
    """Launchers (torchrun's agent, mp.spawn's parent) report their children's exit codes,
    signals included, which the ranks themselves cannot do after SIGKILL."""
    import subprocess

    original_handle = subprocess.Popen._handle_exitstatus  # type: ignore[attr-defined]

    def _handle_exitstatus(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_handle(self, *args, **kwargs)
        try:
            record_child_exit(self.pid, self.returncode)
        except Exception as e:  # noqa: BLE001 - the launcher must go on
            rec = R.existing()
            if rec is not None:
                rec.fail("child_exit", e)
        return result

    subprocess.Popen._handle_exitstatus = _handle_exitstatus  # type: ignore[attr-defined]
    from multiprocessing import popen_fork

    original_poll = popen_fork.Popen.poll

    def poll(self: Any, flag: int = os.WNOHANG) -> Any:
        known = self.returncode
        result = original_poll(self, flag)
        if known is None and result is not None:
            try:
                record_child_exit(self.pid, result)
            except Exception as e:  # noqa: BLE001 - the launcher must go on
                rec = R.existing()
                if rec is not None:
                    rec.fail("child_exit", e)
        return result

    popen_fork.Popen.poll = poll


def install() -> None:
    """Hook this process's exits.  Called once by the bootstrap."""
    _install_excepthooks()
    R.on_create(enable_faulthandler)
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=R.reset_after_fork)
    _patch_child_exits()
    from ddpdoctor.runtime import supervisor_watch

    supervisor_watch.start()
