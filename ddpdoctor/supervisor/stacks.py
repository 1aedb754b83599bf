"""Capture every live rank's Python stack with py-spy, in parallel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddpdoctor.rundir.layout import write_json_atomic

PY_SPY_TIMEOUT = 10.0
PY_SPY_ENV = "DDPDOCTOR_PY_SPY"  # the py-spy to use ("": none), before any lookup
MAX_PARALLEL = 16


def py_spy_path() -> str | None:
    """py-spy as DDPDOCTOR_PY_SPY names it (empty: none), else beside the running
    interpreter (a venv or pipx install that is not on PATH), then in the scripts dir of
    this install, then on PATH."""
    chosen = os.environ.get(PY_SPY_ENV)
    if chosen is not None:
        return shutil.which(chosen) if chosen else None
    beside = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    for folder in beside:
        found = shutil.which("py-spy", path=str(folder))
        if found is not None:
            return found
    return shutil.which("py-spy")


def main_thread(threads: list[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    """The main thread of py-spy's dump of ``pid``: the thread whose OS id is the pid, else
    the one named MainThread (py-spy names threads only when it could read them from the
    process), else the oldest: py-spy lists the newest thread first (here ddpdoctor's own
    threads, whose frames say nothing of the user's code)."""
    for t in threads:
        if t.get("os_thread_id") == pid:
            return t
    for t in threads:
        if t.get("thread_name") == "MainThread":
            return t
    return threads[-1] if threads else None


def _frames(thread: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "filename": f.get("filename"), "line": f.get("line")}
            for f in thread.get("frames", []) if isinstance(f, dict)]


def dump_stack(pid: int, exe: str | None) -> dict[str, Any]:
    """py-spy's view of ``pid``: {"pid", "frames" (main thread, innermost first), "threads"}
    or {"pid", "error"} saying why there is none."""
    if exe is None:
        return {"pid": pid, "error": "py-spy is not installed (pip install py-spy)"}
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                             capture_output=True, timeout=PY_SPY_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return {"pid": pid, "error": f"py-spy did not answer within {PY_SPY_TIMEOUT:.0f} s"}
    except OSError as e:
        return {"pid": pid, "error": f"py-spy could not run: {e.strerror or e}"}
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).decode(errors="replace").strip().splitlines()
        reason = next((m for m in reversed(msg) if m.strip()), f"exit {out.returncode}")
        if "ermission" in reason or "ptrace" in reason.lower():
            reason += " (ptrace denied: run as root or set kernel.yama.ptrace_scope=0)"
        return {"pid": pid, "error": f"py-spy failed: {reason[:300]}"}
    try:
        threads = json.loads(out.stdout)
    except ValueError:
        return {"pid": pid, "error": "py-spy printed no JSON"}
    if not isinstance(threads, list):
        return {"pid": pid, "error": "py-spy printed unexpected JSON"}
    main = main_thread([t for t in threads if isinstance(t, dict)], pid)
    return {"pid": pid, "frames": _frames(main) if main else [],
            "threads": [{"name": t.get("thread_name"), "frames": _frames(t)}
                        for t in threads if isinstance(t, dict)]}


def capture_stacks(pids: list[int], stacks_dir: Path,
                   parents: dict[int, int] | None = None) -> dict[int, dict[str, Any]]:
    """Dump every pid in parallel; each result is also written to stacks/pid-<pid>.json
    (with ``parent``, the rank a child process belongs to, where ``parents`` says)."""
    exe = py_spy_path()
    results: dict[int, dict[str, Any]] = {}
    if not pids:
        return results
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(pids))) as pool:
        for pid, result in zip(pids, pool.map(lambda p: dump_stack(p, exe), pids)):
            if parents and pid in parents:
                result["parent"] = parents[pid]
            results[pid] = result
            try:
                write_json_atomic(stacks_dir / f"pid-{pid}.json", result)
            except OSError:
                result.setdefault("error", "could not save the stack (run dir not writable)")
    return results
