"""A rank's stack is its main thread's, whichever order py-spy lists the threads in and whether
or not it could read their names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ddpdoctor.supervisor.stacks import dump_stack, main_thread, py_spy_path

JOB = """
import os, signal, threading, time
def helper():
    time.sleep(300)
for _ in range(2):
    threading.Thread(target=helper, daemon=True).start()
def frozen_here():
    os.kill(os.getpid(), signal.SIGSTOP)
frozen_here()
"""


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def test_the_main_thread_of_a_stopped_rank_with_threads(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", JOB])
    try:
        deadline = time.monotonic() + 30
        while not _stopped(proc.pid):
            assert time.monotonic() < deadline, "the job never stopped itself"
            time.sleep(0.05)
        found = dump_stack(proc.pid, py_spy_path())
        assert "error" not in found, found
        assert len(found["threads"]) == 3
        assert [f["name"] for f in found["frames"]][:1] == ["frozen_here"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_without_thread_names_the_oldest_thread_is_the_main_one() -> None:
    newest_first = [{"thread_name": None, "os_thread_id": None, "frames": [{"name": "b"}]},
                    {"thread_name": None, "os_thread_id": None, "frames": [{"name": "main"}]}]
    assert main_thread(newest_first, 42)["frames"][0]["name"] == "main"
    by_id = [{"thread_name": None, "os_thread_id": 42, "frames": []}] + newest_first
    assert main_thread(by_id, 42) is by_id[0]
    assert main_thread([], 42) is None
