"""ddpdoctor's own bug after the job started (planted in the supervisor's loop of a real
`run`, by monkeypatching in ddpdoctor's process) stops the job, its DataLoader workers
included, writes a report, says one line and exits non-zero (70)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
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

# ddpdoctor with a bug planted in its loop: the first look at the traces once the job's
# DataLoader workers run raises
DOCTOR = '''
import os, sys
from ddpdoctor.supervisor.attempt_watch import AttemptWatch
from ddpdoctor.cli import main

original = AttemptWatch.check_traces

def planted(self):
    if os.path.exists(os.path.join(sys.argv[1], "ready")):
        raise RuntimeError("planted bug")
    return original(self)

AttemptWatch.check_traces = planted
sys.exit(main(sys.argv[2:]))
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_own_error_after_the_start_stops_the_whole_job(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", DOCTOR, str(pids), "run", "--run-dir", str(run_dir),
         "--hang-timeout", "30", "--", sys.executable, str(job), str(pids)],
        capture_output=True, text=True, timeout=120)
    started = [int(p.name) for p in pids.iterdir() if p.name.isdigit()]
    assert len(started) == 3, (started, done.stderr[-2000:])  # the script and 2 workers
    assert [p for p in started if _alive(p)] == []
    assert done.returncode == 70, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "internal error" in line]
    assert len(said) == 1 and "planted bug" in said[0], done.stderr
    assert "planted bug" in (run_dir / "ddpdoctor-error.txt").read_text()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["outcome"] == "interrupted" and report["exit_code"] == 70
    assert any("planted bug" in p for p in report["problems"]), report["problems"]
