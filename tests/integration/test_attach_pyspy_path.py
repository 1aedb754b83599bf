"""`ddpdoctor attach` run by the interpreter's full path, with py-spy not on PATH: py-spy is
found beside the interpreter (a venv or pipx install that is not activated)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.proc.table import alive, descendants, scan
from tests.conftest import JOBS

pytestmark = pytest.mark.slow
JOB = JOBS / "rank0_barrier.py"
BARE_PATH = "/usr/bin:/bin"  # no venv, no pyenv shims: py-spy is not on it


def test_attach_finds_py_spy_beside_the_interpreter_when_it_is_not_on_path(tmp_path):
    beside = Path(sys.executable).parent / "py-spy"
    assert beside.exists(), "this test needs py-spy installed beside the interpreter"
    assert shutil.which("py-spy", path=BARE_PATH) is None, "py-spy is on the bare PATH"
    ready = tmp_path / "ready"
    ready.mkdir()
    job = subprocess.Popen(["torchrun", "--standalone", "--nproc-per-node", "2", str(JOB)],
                           env={**os.environ, "READY_DIR": str(ready)}, cwd=tmp_path,
                           start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    tree = {job.pid}
    try:
        deadline = time.monotonic() + 120
        while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before it hung"
            time.sleep(0.2)
        assert len(list(ready.iterdir())) == 2, "the ranks never reached the divergence"
        tree |= descendants(scan(), [job.pid])
        run_dir = tmp_path / "attach"
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": BARE_PATH}
        proc = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "attach", str(job.pid),
                               "--run-dir", str(run_dir)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env=env)
        assert "py-spy is not installed" not in proc.stderr + proc.stdout
        assert proc.returncode == 1, proc.stderr
        report = json.loads((run_dir / "report.json").read_text())
        assert report["sources"]["stacks"].startswith("py-spy")
        stacks = [r["stack"] for r in report["ranks"]]
        assert len(stacks) == 2 and all(stacks), "py-spy took no stack"
        assert report["findings"][0]["ranks"] == [0]
    finally:
        for pid in (p for p in tree | descendants(scan(), [job.pid]) if alive(p)):
            os.kill(pid, signal.SIGKILL)
