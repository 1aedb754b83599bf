"""Inside a rank: dump torch's flight recorder to the run dir when the supervisor asks.

A rank blocked in a collective never returns to Python's main loop, so a signal handler
would not run: a daemon thread polls the request file instead (one stat every
POLL_S) and writes ``torch._C._distributed_c10d._dump_fr_trace`` when it changes: torch's
own pickle, under torch's own name (trace/fr_files.py), which torch's ``torchfrtrace`` reads.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from ddpdoctor.runtime import recorder
from ddpdoctor.runtime.notices import notice
from ddpdoctor.rundir.layout import write_bytes_atomic
from ddpdoctor.trace import fr_files, fr_pickle
from ddpdoctor.rundir.safe_path import make_dirs

POLL_S = 0.5
_started: int | None = None  # the pid whose watcher runs (a forked rank has none)


def check_buffer_env() -> None:
    """Say once when TORCH_FR_BUFFER_SIZE (or its older name) is set to what torch cannot
    read as a number: torch 2.13's gloo then hangs or aborts creating the process group (the
    variable is left as set: the job runs as it would without ddpdoctor)."""
    for name in fr_files.BUFFER_ENVS:
        value = os.environ.get(name)
        if value is None or re.match(r"\s*[+-]?\d", value):
            continue
        notice(f"{name}={value!r} is not an integer: torch 2.13's gloo process group hangs "
               "or aborts (SIGABRT) while it is created with such a value; set a number (0 "
               "turns the flight recorder off)")


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def dump_now(run_dir: Path, rank: int | None = None) -> Path | None:
    """Write this rank's flight recorder entries as torch does (a pickle, no stack traces);
    None when there is no process
    group yet (or this torch has no flight recorder).  With ``rank``, also after the
    process group was destroyed (the recorder keeps its entries)."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or (rank is None and not dist.is_initialized()):
        return None
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    if dump is None:
        return None
    data = _as_torch_tool_reads(dump(True, False, False))
    path = fr_files.dump_path(run_dir, dist.get_rank() if rank is None else rank)
    make_dirs(path.parent)
    write_bytes_atomic(path, data if isinstance(data, bytes) else str(data).encode())
    return path


def _as_torch_tool_reads(data: bytes) -> bytes:
    """torch's pickle, with the group names its gloo dumps leave out put back (see
    fr_pickle.repaired); as it came when there is nothing to repair."""
    import pickle

    try:
        dump = fr_pickle.decode(data, "torch's dump")
    except fr_pickle.NotPlainData:
        return data
    fixed = fr_pickle.repaired(dump) if isinstance(dump, dict) else dump
    return data if fixed is dump else pickle.dumps(fixed, protocol=2)


def _watch(run_dir: Path) -> None:
    request = fr_files.request_path(run_dir)
    seen = _mtime(request)
    while True:
        time.sleep(POLL_S)
        now = _mtime(request)
        if now is None or now == seen:
            continue
        seen = now
        try:
            dump_now(run_dir)
        except Exception as e:  # noqa: BLE001 - a failed dump must never reach the job
            rec = recorder.active()
            if rec is not None:
                rec.note_error("dumping the flight recorder", e)
            return  # one failure is noted; the job runs on without dumps


def install() -> None:
    """Start the watcher thread once in this process (ranks of `ddpdoctor run`); a forked child
    starts its own, as threads do not survive fork."""
    global _started
    run_dir = os.environ.get(recorder.ENV_RUN_DIR)
    if _started == os.getpid() or not run_dir:
        return
    _started = os.getpid()
    threading.Thread(target=_watch, args=(Path(run_dir),), name="ddpdoctor-fr-dump",
                     daemon=True).start()
