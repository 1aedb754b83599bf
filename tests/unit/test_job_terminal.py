"""The job's output through ddpdoctor's copier keeps what the job would see without it: a
terminal where ddpdoctor has one (a pseudo-terminal of its size, stdout and stderr in one
order), a pipe where it has none; every byte in job.log as written."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time

import pytest

from ddpdoctor.proc.job_output import JobOutput

CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from ddpdoctor.proc.job_output import JobOutput
    out = JobOutput(open(sys.argv[1], "ab", buffering=0), Path(sys.argv[1]))
    job = ("import sys, os; print('out', sys.stdout.isatty(), os.get_terminal_size(1).columns"
           " if sys.stdout.isatty() else 0); print('err', sys.stderr.isatty(), file=sys.stderr)")
    proc = os.posix_spawn(sys.executable, [sys.executable, "-c", job], os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, out.stdout, 1),
                                        (os.POSIX_SPAWN_DUP2, out.stderr, 2)])
    out.started()
    os.waitpid(proc, 0)
    out.close(5.0)
""")


def _run_under(tmp_path, terminal: bool) -> tuple[str, str]:
    log = tmp_path / "job.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if not terminal:
        done = subprocess.run([sys.executable, "-c", CHILD, str(log)], env=env,
                              capture_output=True, text=True, timeout=60)
        return done.stdout + done.stderr, log.read_text()
    master, slave = os.openpty()
    import fcntl
    import struct
    import termios
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 123, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], env=env,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(10)
    os.close(master)
    return seen.decode(errors="replace"), log.read_text()


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_on_a_terminal_the_job_sees_a_terminal_of_its_size(tmp_path):
    shown, logged = _run_under(tmp_path, terminal=True)
    assert "out True 123" in shown and "err True" in shown, shown
    assert "out True 123\n" in logged and "err True\n" in logged, logged  # bytes as written
    assert "\r" not in logged


def test_off_a_terminal_the_job_writes_into_pipes(tmp_path):
    shown, logged = _run_under(tmp_path, terminal=False)
    assert "out False 0" in shown and "err False" in shown, shown
    assert "out False 0" in logged and "err False" in logged, logged
