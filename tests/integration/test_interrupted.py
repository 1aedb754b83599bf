"""Stopped early, still told: a run interrupted (SIGINT, as Ctrl-C sends) before the hang
timeout runs the causal model on what was recorded.  It names what it saw as a suspect (a
warning, not a verdict): the waiting ranks and the line where the rank they wait for is
held, with two ranks and with four, never "No problem found", and no traceback shown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import JOBS, warmed

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("nproc", [2, 4])
def test_an_interrupted_run_names_the_held_rank_as_a_suspect(tmp_path, nproc):
    ready = tmp_path / "ready"
    ready.mkdir()
    run_dir = tmp_path / "run"
    args = warmed(["run", "--run-dir", str(run_dir), "--hang-timeout", "60",
                   "--nproc-per-node", str(nproc), str(JOBS / "held_rank.py")])
    proc = subprocess.Popen([sys.executable, "-m", "ddpdoctor.cli", *args],
                            env={**os.environ, "READY_DIR": str(ready)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(ready.iterdir())) < nproc and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        time.sleep(3.0)  # the others wait in the barrier for 3 s: well under the timeout
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "No problem found" not in out + err
    # the summary with no traceback over it: what the job printed as it stopped (its
    # launcher's KeyboardInterrupt) is kept in job.log
    assert "Traceback" not in out + err and "ddpdoctor: interrupted" in out, out + err
    assert "job.log" in err and (run_dir / "job.log").is_file()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["outcome"] == "interrupted"
    serious = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    assert serious, report["findings"]
    first = serious[0]
    assert first["severity"] == "warning" and first["ranks"] == [1], first
    assert first["summary"].startswith("when interrupted"), first["summary"]
    held = next(i + 1 for i, t in enumerate((JOBS / "held_rank.py").read_text().splitlines())
                if "while not os.path.exists" in t)
    assert f"held_rank.py:{held}" in first["summary"] + first["detail"], first
    assert not [f for f in report["findings"] if f["severity"] == "error"]
