"""ddpdoctor's own bug after the job started (planted in a real `run` by monkeypatching in
ddpdoctor's process: in the supervisor's loop, or before the supervisor took over) stops the
job, its DataLoader workers included, writes a report, says one line and exits 70."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = '''
import os, sys, time
import torch
from torch.utils.data import DataLoader

PIDS = sys.argv[1]

def note(_):
    open(os.path.join(PIDS, str(os.getpid())), "w").close()

note(0)
loader = DataLoader(list(range(10**6)), batch_size=1, num_workers=2, worker_init_fn=note,
                    persistent_workers=True)
for i, _ in enumerate(loader):
    if i == 4:
        open(os.path.join(PIDS, "ready"), "w").close()
    time.sleep(0.05)
'''

# ddpdoctor with a bug planted once the job's DataLoader workers run: in the first look at
# the traces (the supervisor's loop), or where the supervisor opens the other nodes (before
# it took over: run's outermost handler alone)
DOCTOR = '''
import os, sys, time
from ddpdoctor.cli import main
from ddpdoctor.supervisor.attempt_watch import AttemptWatch
from ddpdoctor.supervisor.nodes import Nodes

ready = os.path.join(sys.argv[1], "ready")

def in_loop(self):
    if os.path.exists(ready):
        raise RuntimeError("planted bug")
    return original(self)

def before_the_loop(self, *args):
    while not os.path.exists(ready):
        time.sleep(0.1)
    raise RuntimeError("planted bug")

if sys.argv[2] == "loop":
    original = AttemptWatch.check_traces
    AttemptWatch.check_traces = in_loop
else:
    Nodes.open = before_the_loop
sys.exit(main(sys.argv[3:]))
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("where", ["loop", "start"])
def test_own_error_after_the_start_stops_the_whole_job(tmp_path, where):
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    run_dir = tmp_path / "run"
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: a job left running
        # would hold a pipe open and make the wait for its end look like a stop
        returncode = subprocess.run(
            [sys.executable, "-c", DOCTOR, str(pids), where, "run", "--run-dir", str(run_dir),
             "--hang-timeout", "60", "--", sys.executable, str(job), str(pids)],
            stdout=stdout, stderr=stderr, timeout=120).returncode
    started = [int(p.name) for p in pids.iterdir() if p.name.isdigit()]
    left = [p for p in started if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = out.read_text(), err.read_text()
    assert len(started) == 3, (started, stderr[-2000:])  # the script and 2 workers
    assert left == [], stderr[-2000:]
    assert returncode == 70, stderr[-3000:]
    assert "Traceback" not in stdout + stderr
    said = [line for line in stderr.splitlines() if "internal error" in line]
    assert len(said) == 1 and "planted bug" in said[0], stderr
    assert "planted bug" in (run_dir / "ddpdoctor-error.txt").read_text()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["outcome"] == "interrupted" and report["exit_code"] == 70
    assert any("planted bug" in p for p in report["problems"]), report["problems"]


UI_BUG = '''
import sys
import ddpdoctor.tui.app

def planted(*args):
    raise RuntimeError("planted UI bug")

ddpdoctor.tui.app.run_live = planted
from ddpdoctor.cli import main
sys.exit(main(sys.argv[1:]))
'''


def _drain(fd: int) -> None:
    """Read what ddpdoctor writes to its terminal (a full pty would block it)."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_bug_of_the_ui_leaves_the_supervision_going(tmp_path):
    """`run --ui` on a terminal (a real pty) whose UI fails: said in one line, the job
    supervised to its end without the UI, its own exit status and a report."""
    import pty

    run_dir = tmp_path / "run"
    controller, terminal = pty.openpty()
    err = tmp_path / "err"
    threading.Thread(target=_drain, args=(controller,), daemon=True).start()
    try:
        with err.open("w") as stderr:
            returncode = subprocess.run(
                [sys.executable, "-c", UI_BUG, "run", "--ui", "--run-dir", str(run_dir), "--",
                 sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(3)"],
                stdin=terminal, stdout=terminal, stderr=stderr, timeout=120).returncode
    finally:
        os.close(terminal)
    said = err.read_text()
    assert returncode == 3, said
    assert "internal error in the UI (RuntimeError: planted UI bug" in said, said
    assert "Traceback" not in said
    assert "planted UI bug" in (run_dir / "ddpdoctor-error.txt").read_text()
    assert json.loads((run_dir / "report.json").read_text())["outcome"] == "failed"
