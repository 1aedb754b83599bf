"""Every way a run is ended from outside writes the report, prints the verdict, leaves no
process and exits 128 + the signal: Ctrl-C to the whole foreground group with the output a
pipe (`ddpdoctor run ... 2>&1 | tee log`), SIGTERM, SIGHUP (the terminal went away), and a
closed output (`| head` exited, the `tee` was killed: 141, as SIGPIPE ends a process).
With no output left (the terminal closed) the report alone holds the verdict.

Each job (tests/robustness/jobs/tree_job.py) has, per rank, a DataLoader worker and a `sleep`
grandchild in a session of its own; all of them must be gone afterwards, read from /proc by
the run's mark in their environment (never searched by name).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import default_signals, warm_launch

from .helpers import JOBS, doctor_argv, job_pids, kill_leftovers, read_report, wait_until

pytestmark = pytest.mark.slow

TREE_JOB = JOBS / "tree_job.py"
EVERY = ("rank-0", "rank-1", "worker-0", "worker-1", "grandchild-0", "grandchild-1")
ENDED_S = 90  # the whole ending (stacks, report, stop) on a loaded machine


def _doctor(run_dir: Path) -> list[str]:
    return doctor_argv("run", "--run-dir", str(run_dir), "--hang-timeout", "60",
                       *warm_launch(2, TREE_JOB))


def _env(pid_dir: Path) -> dict[str, str]:
    return {**os.environ, "PID_DIR": str(pid_dir), "MODE": "long", "SECONDS": "120"}


def _recorded(pid_dir: Path) -> dict[str, int]:
    return {p.stem: int(p.read_text()) for p in pid_dir.glob("*.pid") if p.read_text()}


def _started(pid_dir: Path, run_dir: Path) -> bool:
    """Every process of the job runs and the ranks have begun to record."""
    return set(EVERY) <= set(_recorded(pid_dir)) and any((run_dir / "traces").glob("*.ring"))


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _check_ended(run_dir: Path, pid_dir: Path, signame: str, output: str) -> None:
    try:
        left = {k: p for k, p in _recorded(pid_dir).items() if _running(p)}
        assert not left, f"processes of the job still alive: {left}"
        assert not job_pids(run_dir), f"processes of the run left behind: {job_pids(run_dir)}"
    finally:
        kill_leftovers(run_dir)
    report = read_report(run_dir / "report.json")
    assert report["outcome"] == "interrupted" and report["live"] is False
    assert report["interrupted_by"] == signame
    pids = _recorded(pid_dir)
    assert {pids[w] for w in ("rank-0", "rank-1", "worker-0", "worker-1")} <= \
        set(report["stopped"]["pids"])
    if output:  # where the verdict could be printed
        assert "ddpdoctor: interrupted" in output, output[-3000:]  # the verdict's box
        assert str(run_dir / "report.json") in output.replace("\n", ""), output[-3000:]


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    path = tmp_path / "pids"
    path.mkdir()
    return path


def test_ctrl_c_to_the_foreground_group_with_the_output_a_pipe(run_dir, pid_dir, tmp_path):
    # `ddpdoctor run ... 2>&1 | tee -i log`, one process group as a shell's job; the
    # terminal's Ctrl-C is SIGINT to all of it (tee -i lives on to show what was printed)
    log = tmp_path / "log"
    doctor = subprocess.Popen(_doctor(run_dir), env=_env(pid_dir), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              preexec_fn=lambda: (default_signals(), os.setpgrp()))
    tee = subprocess.Popen(["tee", "-i", str(log)], stdin=doctor.stdout,
                           stdout=subprocess.DEVNULL,
                           preexec_fn=lambda: os.setpgid(0, doctor.pid))
    doctor.stdout.close()  # type: ignore[union-attr]
    try:
        assert wait_until(lambda: _started(pid_dir, run_dir), ENDED_S)
        os.killpg(doctor.pid, signal.SIGINT)
        assert doctor.wait(timeout=ENDED_S) == 130
        tee.wait(timeout=10)
    finally:
        for p in (doctor, tee):
            if p.poll() is None:
                p.kill()
    _check_ended(run_dir, pid_dir, "SIGINT", log.read_text())


def test_sigterm_ends_the_run(run_dir, pid_dir, tmp_path):
    out = tmp_path / "out"
    with open(out, "wb") as f:
        doctor = subprocess.Popen(_doctor(run_dir), env=_env(pid_dir), stdout=f,
                                  stderr=subprocess.STDOUT, preexec_fn=default_signals)
    try:
        assert wait_until(lambda: _started(pid_dir, run_dir), ENDED_S)
        doctor.send_signal(signal.SIGTERM)
        assert doctor.wait(timeout=ENDED_S) == 143
    finally:
        if doctor.poll() is None:
            doctor.kill()
    _check_ended(run_dir, pid_dir, "SIGTERM", out.read_text())


def test_the_terminal_going_away_ends_the_run(run_dir, pid_dir):
    # ddpdoctor in a terminal of its own (a pty it controls); the terminal closes: the
    # kernel sends SIGHUP, and every later write to the terminal fails (EIO)
    master, slave = os.openpty()
    doctor = subprocess.Popen(_doctor(run_dir), env=_env(pid_dir),
                              preexec_fn=lambda: (default_signals(), _login_tty(slave)),
                              pass_fds=(slave,))
    os.close(slave)
    seen = bytearray()
    try:
        def started() -> bool:
            _drain(master, seen)  # a terminal that is read, until it goes
            return _started(pid_dir, run_dir)

        assert wait_until(started, ENDED_S)
        os.close(master)
        assert doctor.wait(timeout=ENDED_S) == 129
    finally:
        if doctor.poll() is None:
            doctor.kill()
    report = read_report(run_dir / "report.json")  # the verdict's only reader now
    assert report["findings"] == [] or all(f["severity"] != "error"
                                           for f in report["findings"])
    _check_ended(run_dir, pid_dir, "SIGHUP", "")


def _login_tty(fd: int) -> None:
    """os.login_tty (Python 3.11+): a session of its own whose terminal is ``fd``, on
    stdin, stdout and stderr."""
    import fcntl
    import termios

    os.setsid()
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    for target in (0, 1, 2):
        os.dup2(fd, target)


def _drain(fd: int, into: bytearray) -> None:
    import select

    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.extend(chunk)


def test_closed_output_ends_the_run(run_dir, pid_dir, tmp_path):
    # `ddpdoctor run ... | head`: the reader of stdout goes; the verdict goes to stderr
    err = tmp_path / "err"
    reader = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(3600)"],
                              stdin=subprocess.PIPE)
    with open(err, "wb") as f:
        doctor = subprocess.Popen(_doctor(run_dir), env=_env(pid_dir), stdout=reader.stdin,
                                  stderr=f)
    reader.stdin.close()  # type: ignore[union-attr]
    try:
        assert wait_until(lambda: _started(pid_dir, run_dir), ENDED_S)
        reader.kill()
        assert doctor.wait(timeout=ENDED_S) == 128 + signal.SIGPIPE
    finally:
        for p in (doctor, reader):
            if p.poll() is None:
                p.kill()
        reader.wait()
    _check_ended(run_dir, pid_dir, "SIGPIPE", err.read_text())
