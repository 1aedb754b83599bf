"""Inside one real process (gloo, world 1): seq counters under threads, group identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.trace.reader import read_trace

pytestmark = pytest.mark.slow

SCRIPT = r'''
import os, sys, threading
import torch
import torch.distributed as dist
from ddpdoctor.runtime import init_hooks, patches, recorder

patches.install()
store = dist.HashStore()
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
init_hooks.on_init()
t = torch.ones(4)

def loop():
    for _ in range(300):
        dist.all_reduce(t)

threads = [threading.Thread(target=loop) for _ in range(2)]
for th in threads:
    th.start()
loop()
for th in threads:
    th.join()
dist.destroy_process_group()
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
dist.all_reduce(t)
with recorder.recorded_call("broadcast", None, [t]):
    pass
try:
    with recorder.recorded_call("broadcast", None, [t]):
        raise ValueError("the body failed")
except ValueError:
    pass
with recorder.recorded_call("broadcast", None, [t]) as call:
    call.keep_open()
dist.destroy_process_group()
print(recorder.active().writer.ring_path)
'''


def _run(tmp_path: Path) -> Path:
    env_path = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
        env={"DDPDOCTOR_RUN_DIR": str(tmp_path), "PYTHONPATH": env_path,
             "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_seq_threads_group_reinit_and_recorded_call(tmp_path: Path) -> None:
    trace = read_trace(_run(tmp_path))
    calls = [r for r in trace.records if r.op == "all_reduce"]
    assert len(calls) == 901
    seqs = sorted(r.seq for r in calls)
    assert seqs == list(range(901))  # no seq given twice by the three threads
    assert {r.group_index for r in calls} == {0}  # the re-created default group is the same
    assert calls[-1].seq == 900  # ... and its seq goes on
    ok, failed, still_open = [r for r in trace.records if r.op == "broadcast"]
    line = SCRIPT.splitlines().index('with recorder.recorded_call("broadcast", None, [t]):') + 1
    assert not ok.open and not ok.flags & 4
    assert ok.callsite == f"<string>:{line}" and ok.framework_site == ""  # the user's line
    assert not failed.open and failed.flags & 4  # FAILED
    assert still_open.open
    groups = [m for m in trace.meta if m.get("event") == "group"]
    assert len(groups) == 1 and groups[0]["name"] == "0", json.dumps(groups)
